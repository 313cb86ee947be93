// Package nn holds reference neural-network layers, losses and optimizers on
// gorgonia.org/tensor for ppgen's pipeline runtime. Every layer has a split
// backward pass, as zero-bubble pipeline schedules need it.
//
// # Tensors
//
// Activations are 2-D *tensor.Dense values in batch-major layout
// [batch, features], of dtype tensor.Float32 or tensor.Float64. A layer's
// dtype is fixed when it is built (NewLinear) or, for layers without
// parameters (ReLU, Tanh, GELU), taken from its input. A row-major,
// contiguous input is used in place. A view or a lazily transposed tensor is
// copied once. Masked and column-major tensors are rejected. Bad shapes,
// dtypes and saved contexts give errors that name the offending shapes. They
// never panic: shapes are checked before any kernel runs. The matrix products
// (Linear's, attention's) run on a blocked GEMM with an AVX2/FMA assembly
// micro-kernel where the CPU has both (amd64), and on gonum's GEMM
// (gonum.org/v1/gonum/blas/gonum) elsewhere. Both split the work into
// fixed tiles that depend on the matrix sizes only, so results are
// deterministic and do not depend on GOMAXPROCS (they do differ between a
// CPU with FMA and one without); the elementwise kernels are plain loops
// over the backing slices.
//
// # Transformer layers
//
// A batch of B token sequences of length T is a [B·T, features] matrix,
// sequence b in rows b·T to (b+1)·T-1, in position order. Embedding maps
// [rows, 1] token ids to vectors (a token table plus a learned position
// table), RMSNorm normalizes rows, CausalAttention is multi-head causal
// attention over the rows of each sequence (its input the queries, keys and
// values side by side, [rows, 3·d]), Residual adds a layer's input to its
// output. NewSelfAttention, NewMLPBlock and NewTransformerBlock compose them
// with Linear and GELU into a pre-norm GPT block; a head is RMSNorm, a
// Linear to the vocabulary (or a TiedHead, whose weight is the embedding's
// token table: logits x·Tokenᵀ) and SoftmaxCrossEntropy on [rows, 1] class
// indices. Every one has the split backward below and a finite-difference
// gradient check (transformer_test.go, tied_test.go). Their saved contexts do not
// implement Swappable (see below): swap schedules take the MLP layers.
//
// # Split backward
//
// Each Layer (and each Sequential, the model chunk of one pipeline stage)
// has
//
//	Forward(x) (y, saved, err)
//	BackwardInput(saved, dy) (dx, err)   // gradient with respect to x only
//	BackwardWeight(saved, dy) error      // adds parameter gradients to Param.Grad
//	Backward(saved, dy) (dx, err)        // BackwardInput then BackwardWeight
//
// These methods match runtime/pipe's Stage interface structurally. Gradients
// are accumulated (+=) into Param.Grad until ZeroGrad clears them. A saved
// context belongs to one Forward call. Forward keeps references to its input
// and output: callers must not change x until BackwardWeight has run on the
// saved context. BackwardWeight can run only once per saved context. After it
// runs, the context drops its tensors so their memory can be freed. Any number
// of saved contexts (micro-batches) may be outstanding at once. A layer is not
// safe for concurrent use: run one stage's calls on one goroutine.
//
// A Sequential's BackwardInput keeps the output gradients that it computes
// for every inner layer that has parameters. BackwardWeight reuses them and
// does not run the input-gradient pass again. So Sequential.BackwardWeight
// returns an error unless BackwardInput has already run on the same saved
// context. BackwardWeight takes the gradient of the last layer's output from
// its own dy argument. That argument must hold the same values as the dy
// given to BackwardInput. Split and fused backward run exactly the same
// arithmetic, so their results are bit-identical. A Linear's BackwardWeight
// needs only the saved input and dy, so it does not require a prior
// BackwardInput.
//
// # Buffer reuse
//
// The layers' results are fresh tensors, and a step of a stage makes many:
// every activation and gradient of every micro-batch. Those whose end is
// certain are handed back for the next result of their length: a
// Sequential's inner outputs when its saved context ends (BackwardWeight),
// its inner gradients once the layer below has read them, a Residual's
// inner output and gradient once added, attention's weights after its
// BackwardInput. Nothing a caller holds is handed back: a Sequential's own
// output and input gradient, its input and the output gradient it is given
// stay the caller's. So a layer may have any number of saved contexts in
// flight, on any goroutine per stage: no two of them share a buffer, and
// results are bit-identical to fresh allocations (a reused buffer is
// cleared). Release ends a context no backward will read (an evaluation's:
// a forward-only program calls it, as pipe.Releaser) and hands its inner
// buffers back too; an FSDP passes it on to the stage it shards. A context that ends otherwise (dropped for recompute,
// swapped) leaves its tensors to the garbage collector. A layer of another
// package may pass on what it is given (a wait, an identity): the tensors
// it takes or returns are never handed back.
//
// # Swapping activations
//
// WithSwap(seq, tier) wraps a Sequential so that runtime/pipe can move its
// saved contexts to a runtime/swap tier (host memory or files) between a
// chunk's forward and backward, at the swap steps of a schedule lowered
// with `ppgen gen -swap N`: the wrapper implements pipe.Swapper and
// pipe.SwapWaiter and records every context's bytes in the tier's
// accounting. The contexts of Linear, ReLU, Tanh, GELU and nested
// Sequentials implement Swappable (their tensors can be listed and put
// back); a context comes back bit-identical, so training with swapping
// gives exactly the results of training without it.
//
// # Data parallelism
//
// NewFSDPGroup(comm) shards a rank's stages over its data-parallel group
// (a runtime/collective Comm on the group's transport, runtime/mesh's DP
// view): Wrap(stage, name) keeps 1/DP of the stage's flattened parameters
// and returns an FSDP stage that implements runtime/pipe's Sharded. UNSHARD
// starts the all-gather and returns; the stage's next Forward or backward
// waits for it; RESHARD frees the gathered values; REDUCE_GRAD
// reduce-scatters the gradients into the shard's, and OptStep(opt) steps
// the optimizer on the shards (its state sharded with them).
// NewDataParallel(comm, params) is plain data parallelism: OptStep(opt)
// all-reduces the gradients first. Both sum the gradients over the group in
// member order, so the loss scale counts every replica's micro-batches, and
// both report MemStats (resident parameter, gradient and optimizer bytes,
// peak of gathered stages).
//
// # Gradient clipping
//
// ClipGradNorm clips by the global L2 norm, as torch.nn.utils.clip_grad_norm_
// over the whole model: the norm is the square root of the sum of the
// squares of every gradient element of every parameter of the model, each
// parameter counted once, however many ranks hold a copy of it. Each rank
// computes its share (GradSquares of the parameters it counts), one
// all-reduce of that scalar over the whole world (every pipeline rank of
// every replica) gives the total, and every rank scales the gradients of
// all the parameters it steps on by min(1, maxNorm/(norm+1e-6)). It runs in
// the OPT_STEP hook (the before argument of DataParallel.OptStep and
// FSDPGroup.OptStep), after the data-parallel reduction; runtime/pipe has
// by then run TIE_GRAD and summed the model copies, so every copy of a
// parameter holds the same gradient and exactly one copy is counted
// (NormShare):
//
//   - Data parallelism without FSDP: after the all-reduce every replica
//     holds the same full gradients, so only replica 0 counts them (each
//     parameter once per pipeline position, not once per replica); the
//     other replicas add 0 to the all-reduce and scale alike.
//   - FSDP: each member of a DP group holds its own shard of the reduced
//     gradients (FSDPGroup.Params), so every replica counts its shard; the
//     padding of the last shard is zero and adds nothing.
//   - Ties (Spec.Ties, a TiedStage on each of two stages): the copy on the
//     tie's first stage (the embedding's) counts; the later stage's copy
//     (the head's, its TiedStage.TiedParams) is skipped.
//   - Model copies (Spec.Copies = 2, dualpipe): the copies' gradients have
//     been summed into both, so the parameters of copy 0 (stages
//     0..Stages/2-1) count and those of copy 1 are skipped.
//
// The squares are summed in float64 whatever the dtype, and the ranks'
// shares by runtime/collective's AllReduce (member order, or the engine's
// with native collectives), so the norm equals a sequential sum over the
// model up to that reassociation (a few ulps in float64). A non-finite norm
// scales nothing and returns an error wrapping ErrNonFiniteNorm.
//
// # Loss scale
//
// MSE and SoftmaxCrossEntropy return
//
//	loss = Scale * (1/rows) * Σ_r ℓ_r
//
// and its exact gradient dy = ∂loss/∂y. Here rows is the number of rows in
// the micro-batch and ℓ_r is the loss of row r. For MSE, ℓ_r is the mean
// squared error over the row's features, as in PyTorch's MSELoss with
// reduction "mean". For SoftmaxCrossEntropy, ℓ_r is the cross-entropy of
// softmax(y_r). A Scale of 0 means 1. A trainer that splits a batch of N rows
// into micro-batches of n_m rows sets Scale = n_m/N for micro-batch m. With M
// equal micro-batches that is Scale = 1/M. The losses of the micro-batches
// then add up to the mean loss over the full batch, and so do the gradients
// that accumulate in Param.Grad. Pipeline training over M micro-batches thus
// matches sequential training on the whole batch.
//
// # Parameters and optimizers
//
// Params returns stable *Param pointers (Name, Value, Grad). SGD (with
// momentum, PyTorch convention), Adam (PyTorch convention, with bias
// correction) and AdamW (torch.optim.AdamW: decoupled weight decay before
// Adam's update, PyTorch's defaults from NewAdamW) keep their per-parameter
// state keyed by those pointers. Step checks every parameter before it
// changes any of them. It does not zero the gradients. State exports that
// state for a checkpoint as an OptimState keyed by parameter name (unique
// names: PrefixNames by layer), SetState restores it, and SetLR takes a
// learning-rate Schedule's value (ConstantLR, LinearWarmup, CosineDecay,
// LinearDecay: pure functions of the step, so a checkpoint stores the step). Initialization is deterministic: NewLinear draws Xavier-uniform
// weights in float64 from the *rand.Rand it is given and sets the bias to
// zero. NewRand gives a seeded PCG source. So float32 and float64 models
// built from the same seed hold the same values up to rounding.
package nn
