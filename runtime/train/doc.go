// Package train is the training loop over ppgen's generated programs: what a
// trainer hands it is its model, its data and a few options, and it runs the
// job, as torchtitan's Trainer does for PyTorch's pipeline schedules.
//
// Given a generated program (its Spec and rank functions, Program), a layer
// factory (model layer index → nn.Layer), a loss, a data source and Config's
// options, Run
//
//   - opens the world by name (runtime/world: "inproc", "tcp", "mpi",
//     "nccl"), P·DP ranks laid out by runtime/mesh (world rank = pp·DP + dp);
//   - builds exactly this process's ranks' stages: stage s holds the layers
//     Layers[s] (the program's Spec.Layers, which `ppgen gen -model FILE`
//     records — `-schedule auto -partition auto`'s split included — or
//     Config.Layers), each built by the factory; with two model copies
//     (dualpipe, Spec.Copies) the copy's stages are built from the same
//     layers again; a stage of a tie (Spec.Ties) declares its tied
//     parameters through its layers' TiedParams (nn.Tie); with DP > 1 every
//     replica builds the same stages and their gradients are all-reduced
//     over the data-parallel group (nn.DataParallel), or, with FSDP, each
//     stage is sharded over it (nn.FSDPGroup);
//   - runs Config.Steps steps: the program over the step's micro-batches
//     (Config.Data), then the optimizer on every parameter the rank holds,
//     after the gradients were clipped by their global L2 norm
//     (nn.ClipGradNorm, each parameter counted once: nn.NormShare), at the
//     learning rate of the schedule (nn.Schedule);
//   - gathers the step's loss on every rank: the ranks that computed a
//     micro-batch's loss add theirs, the others 0, and one all-reduce over
//     the world gives every rank the step's mean loss (the loss is scaled by
//     1/(M·DP), so the sum is the mean over the global batch);
//   - evaluates with the forward-only program generated beside the train
//     program (`ppgen gen -forward-only -name Eval`, Config.Eval), over the
//     same stages in the same world (one rendezvous checks both
//     fingerprints, pipe.Fingerprints);
//   - writes one runtime/metrics record per step (step, loss, lr, grad
//     norm, tokens/s, step time, tokens seen; eval_loss on the steps that
//     evaluate) and calls Config.Hooks;
//   - saves checkpoints (runtime/checkpoint, keyed by layer: every rank's
//     parameters and AdamW's moments by (layer, name), the step, the LR
//     schedule's step, the data position and the tokens seen in the
//     manifest, and the trainer's own state through SaveState) every
//     CheckpointEvery steps and at the end (or at StopAfter, a preempted
//     job's stop), and resumes from one (Config.Resume) under the same or
//     another schedule, P, split or DP;
//   - on request wraps each built stage (Config.WrapStage: SwapTiers for
//     a -swap program's swap steps, instrumentation), runs the
//     programs as data through pipe.Interpret (Config.Interpret,
//     Program.Ops), trains a tower replicated on every rank (Config.Tower,
//     Config.TowerAtFirst: mpipe's preprocess, tower.go; checkpoints hold
//     it once, as checkpoint.TowerLayer of world rank 0's shard), and
//     reports each rank's parameter memory (Result.Ranks).
//
// Reference trains the same Config without a pipeline (one model copy,
// the gradients summed in the pipeline's order): the reference a
// trainer's -check compares a job with.
//
// # Determinism and resume
//
// The data of step k is Config.Data(k, replica): a pure function of the
// step (runtime/data's Sampler is one), so a job resumed at step N reads
// what an uninterrupted job reads, and the data position a checkpoint
// stores is the step. The layer factory must build the same initial layer
// on every call (seed it by the layer index). Training N steps, saving and
// resuming for N more equals 2N uninterrupted steps bit for bit under the
// same program and world size (the optimizer's moments and step counts,
// the learning rate and the data are restored exactly; the sums run in the
// same order). Under another schedule, P or DP the parameters and the
// optimizer state are restored exactly, but the gradients are summed in
// another order (micro-batches split over other replicas, the loss sums),
// so the losses agree within a few ulps of float64 per step, growing with
// the steps (the tests bound it by 1e-9).
//
// # Layouts
//
// The loop builds the stages of every program the tests run: one rank,
// 1f1b, zbv (several stages per rank), mpipe's owned loading, shipped
// labels, ties, dualpipe's two model copies, -clip programs (their
// ALL_REDUCE step reduces the norm), what `-schedule auto -partition auto`
// picks, DP replicas in process or over TCP, and FSDP (Config.FSDP, a
// -fsdp program: each stage sharded over its DP group by nn.FSDPGroup, the
// optimizer stepping on the shards, checkpoints holding FSDP chunks).
// FSDP with ties or two model copies is refused with an error that says
// so.
//
// # Parameter names
//
// Run renames each layer's parameters "i.name" (nncheckpoint.NNName, i the
// parameter's index in the layer's Params), so that they are unique within
// the layer: the checkpoint's key is (layer, that name), and the optimizer
// state is exported by name. A tower's parameters keep the names its layer
// gives them (nn.NewSequential's "i.name"), which must be distinct when the
// job checkpoints.
package train
