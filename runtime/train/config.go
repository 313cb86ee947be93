package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/metrics"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/world"
)

// Program is one generated program: its Spec and its rank functions (the
// generated Spec and Ranks[:], or EvalSpec and EvalRanks[:] of a program
// generated with -name Eval).
type Program struct {
	Spec  pipe.Spec
	Ranks []func(*pipe.Exec) error
	// Ops, if set, is the same program as data, one []pipe.Op per rank
	// (the generated Program of a program generated with -table, or
	// pipe.DecodeOps'), which Config.Interpret runs through
	// pipe.Interpret instead of Ranks (which may then be nil: a program
	// lowered at run time has no generated functions).
	Ops [][]pipe.Op
}

// run returns the function that runs pipeline rank pp's steps of p: its
// generated function, or its Ops through the interpreter.
func (p Program) run(pp int, interpret bool) func(*pipe.Exec) error {
	if !interpret {
		return p.Ranks[pp]
	}
	ops := p.Ops[pp]
	return func(x *pipe.Exec) error { return pipe.Interpret(x, ops) }
}

// checkOps validates p.Ops for Config.Interpret; what names the program
// in an error.
func (p Program) checkOps(what string) error {
	switch {
	case p.Ops == nil:
		return fmt.Errorf("train: Config.Interpret runs the programs as data, and the %s program %s has no Ops (generate it with -table: its Program)", what, p.Spec.Describe())
	case len(p.Ops) != p.Spec.Ranks:
		return fmt.Errorf("train: the %s program has Ops for %d ranks, its Spec %d", what, len(p.Ops), p.Spec.Ranks)
	}
	return nil
}

// Hooks are called by every rank of this process, each on its own
// goroutine (so concurrently for the ranks of one process), with its world
// rank. The values are the same on every rank. An error stops the job.
type Hooks struct {
	// AfterStep runs after each step's optimizer update (and its
	// evaluation and checkpoint, if any), with the step's record.
	AfterStep func(rank int, r metrics.Record) error
	// AfterEval runs after each evaluation with the number of steps taken
	// before it (0: the initial model) and the mean validation loss.
	AfterEval func(rank int, step int, loss float64) error
}

// Config is a training job. Train, Layer, Loss, Data, LR and Steps are
// required; the rest have defaults.
type Config struct {
	// Train is the training program.
	Train Program
	// Eval, if set, is the forward-only program of the same placement
	// (`ppgen gen -forward-only -name Eval`), run every EvalEvery steps.
	Eval *Program

	// World names the transport (runtime/world): "inproc" (default),
	// "tcp", "mpi" or "nccl". WorldOptions are passed to world.Open;
	// Run sets Size (P·DP), Fingerprint (both programs') and Schedule.
	World        string
	WorldOptions world.Options
	// DP is the number of data-parallel replicas of the pipeline (default
	// 1): world rank = pp·DP + dp (runtime/mesh).
	DP int
	// FSDP shards every stage over its DP group (nn.FSDPGroup: each
	// replica holds 1/DP of the stage's flattened parameters, gathered at
	// the program's UNSHARD steps, its gradients reduce-scattered at
	// REDUCE_GRAD): for a program generated with -fsdp N. The optimizer
	// steps on the shards; checkpoints hold them as FSDP chunks
	// (checkpoint.Flat), which any layout resumes from.
	FSDP bool

	// Layers is the split of the model's layers into the program's
	// stages: stage s holds layers Layers[s][0] to Layers[s][1]-1. Default
	// Train.Spec.Layers (`ppgen gen -model FILE` records it). With two
	// model copies it may hold Stages/2 entries, the second copy's stages
	// holding the first's layers.
	Layers [][2]int
	// Layer builds model layer i (a fresh object on every call, with the
	// same initial values: seed it by i). A stage's layers run as an
	// nn.Sequential, in index order. A layer of a tied stage lists its
	// tied parameters by implementing TiedParams() []*nn.Param (nn.Tie).
	Layer func(i int) (nn.Layer, error)
	// WrapStage, if set, wraps each stage the loop built (its layers as
	// one nn.Sequential) before the loop ties or shards it, on world rank
	// rank: nn.Swapping, to offload the saved activations at a program's
	// swap steps (-swap), or an instrumented stage. The wrapper must hold
	// seq's parameters, in order (Params); the loop checks it. Under a
	// selective recompute policy (Spec.RecomputeShare or RecomputeLayers)
	// the wrapper must forward seq's pipe.Recomputable methods (Select,
	// Drop, Rebuild), as nn.Swapping does: the loop refuses, at start-up,
	// a stage whose wrapper hides them (it would recompute whole, not the
	// share the program counts).
	WrapStage func(rank, stage int, seq *nn.Sequential) (nn.ParamStage, error)
	// Tower, if set, builds a replica of a trainable preprocess (the
	// first layers of the model kept out of the stages, or a vision tower:
	// mpipe's transposed block, `ppgen gen -mpipe-pre`), one per rank, a
	// fresh object with the same initial values on every call (that is the
	// parameter broadcast). Each rank runs its forward on the inputs it
	// loads (under mpipe, the micro-batches it owns) and its backward at
	// OPT_STEP; the replicas' gradients are summed across the pipeline
	// (pipe.Config.Tower), counted once in the gradient norm, and every
	// replica steps alike (tower.go). Checkpoints hold its parameters and
	// optimizer state once (checkpoint.TowerLayer, in world rank 0's
	// shard), which a job of any layout with the same tower resumes. With
	// FSDP the stages are sharded and the tower is not: it stays
	// replicated, its gradients all-reduced over the DP group.
	Tower func() (nn.Layer, error)
	// TowerAtFirst, with Tower, runs the tower's forward and backward on
	// the first stage's rank only (pipe.Config.TowerAtFirst: mpipe
	// without owner backward): owners ship raw inputs, no output gradient
	// goes back to them, and the other replicas get the summed gradients
	// (theirs are zero), so every replica still steps alike. The result
	// is the same; the tower's work moves to one rank.
	TowerAtFirst bool
	// Interpret runs the programs' Ops (Program.Ops: generated with
	// -table) through pipe.Interpret instead of their generated
	// functions: the same steps, dispatched at run time.
	Interpret bool
	// Loss returns the last stage's loss with the given scale, 1/(M·DP):
	// nn.SoftmaxCrossEntropy{Scale: scale}, nn.MSE{Scale: scale}.
	Loss func(scale float64) pipe.Loss
	// Data returns the micro-batches of step (0-based) for replica, on
	// the ranks that read data. It must be a pure function of (step,
	// replica) for a resumed job to read what an uninterrupted one reads.
	Data func(step, replica int) (pipe.DataSource, error)
	// EvalData returns the micro-batches of validation run run (0 to
	// EvalRuns-1) for replica.
	EvalData func(run, replica int) (pipe.DataSource, error)
	// EvalRuns is the number of eval program runs per evaluation (default
	// 1); the validation loss is their mean.
	EvalRuns int
	// EvalEvery evaluates before the first step, after every EvalEvery
	// steps and after the last one; 0 never evaluates.
	EvalEvery int

	// Steps is the number of optimizer steps of the whole job (a resumed
	// job runs the ones left).
	Steps int
	// StopAfter, if positive, stops the job after this many steps (a
	// checkpoint is saved there), as a preemption would: a later job with
	// the same Steps resumes from it. The LR schedule and the evaluations
	// are still those of Steps.
	StopAfter int
	// Optimizer returns a new optimizer (one per rank). Default
	// nn.NewAdamW: PyTorch's AdamW defaults.
	Optimizer func() nn.Optimizer
	// LR is the learning-rate schedule, set before every step.
	LR nn.Schedule
	// Clip clips the gradients by their global L2 norm when it exceeds
	// Clip; 0 does not clip (the norm is still measured for the metrics).
	Clip float64
	// TokensPerStep is the tokens (or samples) of one step's global
	// batch, for the metrics' tokens/s and tokens.
	TokensPerStep int64
	// CountTokens, if set, counts the tokens (or samples) of a
	// micro-batch's input; each rank counts the inputs its train program
	// loads (under mpipe, the micro-batches it owns: each rank reads only
	// those), the loop all-reduces the counts over the world, and the sum
	// is the step's tokens in place of TokensPerStep.
	CountTokens func(input *tensor.Dense) int64

	// CheckpointDir, if set, receives a checkpoint every CheckpointEvery
	// steps (0: only at the end) and after the last step.
	CheckpointDir   string
	CheckpointEvery int
	// Resume, if set, is a checkpoint directory to start from: its
	// parameters, optimizer state, step and data position.
	Resume string
	// SaveState, if set, returns the trainer's own state (an RNG's seed
	// and position, a data loader's cursor) as JSON, stored in the
	// checkpoint's manifest under TrainerStateKey (world rank 0's), and
	// LoadState gets it back on every rank of a resumed job.
	SaveState func() (json.RawMessage, error)
	LoadState func(json.RawMessage) error

	// Metrics, if set, receives one JSON line per step (runtime/metrics),
	// written by world rank 0 only.
	Metrics io.Writer
	// Timeline, if set, records the stage calls and transfers of this
	// process's ranks (pipe.Config.Timeline), reset before every step so
	// that it holds the last one's; the records' bubble is then measured
	// over this process's ranks (metrics.Bubble), else NaN.
	Timeline *pipe.Timeline
	Hooks    Hooks
}

// check validates c and returns it with its defaults.
func (c Config) check() (Config, error) {
	sp := c.Train.Spec
	if err := sp.Validate(); err != nil {
		return c, fmt.Errorf("train: the train program: %w", err)
	}
	if sp.ForwardOnly {
		return c, errors.New("train: the train program is forward-only; pass it as Config.Eval and a training program as Config.Train")
	}
	if len(c.Train.Ranks) != sp.Ranks && !(c.Interpret && c.Train.Ranks == nil) {
		return c, fmt.Errorf("train: the train program has %d rank functions for %d ranks", len(c.Train.Ranks), sp.Ranks)
	}
	if c.World == "" {
		c.World = "inproc"
	}
	if c.DP == 0 {
		c.DP = 1
	}
	if c.EvalRuns == 0 {
		c.EvalRuns = 1
	}
	if c.Optimizer == nil {
		c.Optimizer = func() nn.Optimizer { return nn.NewAdamW() }
	}
	copies := max(sp.Copies, 1)
	if c.Layers == nil {
		c.Layers = sp.Layers
	}
	if len(c.Layers) == sp.Stages/copies && copies == 2 {
		c.Layers = append(append([][2]int(nil), c.Layers...), c.Layers...)
	}
	switch {
	case c.FSDP && c.DP < 2:
		return c, fmt.Errorf("train: FSDP shards the stages over the data-parallel replicas; DP %d, want 2 or more", c.DP)
	case c.FSDP && (len(sp.Ties) > 0 || copies > 1):
		return c, fmt.Errorf("train: FSDP with ties or two model copies (%s) is not covered by this loop: their gradients are summed across stages, which FSDP holds as shards", sp.Describe())
	case c.DP < 1:
		return c, fmt.Errorf("train: DP %d; want 1 or more replicas", c.DP)
	case c.Layers == nil:
		return c, fmt.Errorf("train: program %s has no layer split (Spec.Layers): generate it with -model FILE, or set Config.Layers", sp.Describe())
	case len(c.Layers) != sp.Stages:
		return c, fmt.Errorf("train: %d layer ranges for the %d stages of %s", len(c.Layers), sp.Stages, sp.Describe())
	case c.Layer == nil:
		return c, errors.New("train: Config.Layer (the layer factory) is nil")
	case c.Loss == nil:
		return c, errors.New("train: Config.Loss is nil")
	case c.Data == nil:
		return c, errors.New("train: Config.Data is nil")
	case c.LR == nil:
		return c, errors.New("train: Config.LR (the learning-rate schedule) is nil; nn.ConstantLR{Value: lr} for a constant rate")
	case c.Steps < 0 || c.StopAfter < 0:
		return c, fmt.Errorf("train: Steps %d, StopAfter %d; want 0 or more", c.Steps, c.StopAfter)
	case c.Clip < 0 || math.IsNaN(c.Clip) || math.IsInf(c.Clip, 0):
		return c, fmt.Errorf("train: Clip %v; want a positive finite norm, or 0 for none", c.Clip)
	case c.EvalEvery < 0 || c.EvalRuns < 1 || c.CheckpointEvery < 0:
		return c, fmt.Errorf("train: EvalEvery %d, EvalRuns %d, CheckpointEvery %d; want EvalEvery and CheckpointEvery 0 or more, EvalRuns 1 or more", c.EvalEvery, c.EvalRuns, c.CheckpointEvery)
	case c.TowerAtFirst && c.Tower == nil:
		return c, errors.New("train: Config.TowerAtFirst without Config.Tower: it says where the tower runs; set Config.Tower, or clear TowerAtFirst")
	case c.TokensPerStep < 0:
		return c, fmt.Errorf("train: TokensPerStep %d is negative", c.TokensPerStep)
	}
	if c.Interpret {
		if err := c.Train.checkOps("train"); err != nil {
			return c, err
		}
		if c.Eval != nil {
			if err := c.Eval.checkOps("eval"); err != nil {
				return c, err
			}
		}
	}
	if err := c.LR.Check(); err != nil {
		return c, fmt.Errorf("train: LR: %w", err)
	}
	for s, l := range c.Layers {
		if l[0] < 0 || l[1] <= l[0] {
			return c, fmt.Errorf("train: stage %d holds layers [%d,%d); want a non-empty range", s, l[0], l[1])
		}
		if copies == 2 && s >= sp.Stages/2 && l != c.Layers[s-sp.Stages/2] {
			return c, fmt.Errorf("train: stage %d of the second model copy holds layers %v, stage %d of the first %v; want the same", s, l, s-sp.Stages/2, c.Layers[s-sp.Stages/2])
		}
	}
	if c.Eval != nil {
		e := c.Eval.Spec
		switch {
		case !e.ForwardOnly:
			return c, fmt.Errorf("train: the eval program %s is not forward-only (ppgen gen -forward-only)", e.Describe())
		case len(c.Eval.Ranks) != e.Ranks && !(c.Interpret && c.Eval.Ranks == nil):
			return c, fmt.Errorf("train: the eval program has %d rank functions for %d ranks", len(c.Eval.Ranks), e.Ranks)
		case e.Ranks != sp.Ranks || e.Stages != sp.Stages || fmt.Sprint(e.RankOf) != fmt.Sprint(sp.RankOf) || max(e.Copies, 1) != copies:
			return c, fmt.Errorf("train: the eval program places %d stages on %v, the train program %d on %v; generate both for the same placement", e.Stages, e.RankOf, sp.Stages, sp.RankOf)
		case c.EvalData == nil:
			return c, errors.New("train: Config.Eval is set and Config.EvalData is nil")
		}
	}
	return c, nil
}

// fingerprint is what the world's ranks check at their one rendezvous:
// both programs'.
func (c Config) fingerprint() string {
	if c.Eval == nil {
		return c.Train.Spec.Fingerprint
	}
	return pipe.Fingerprints(c.Train.Spec.Fingerprint, c.Eval.Spec.Fingerprint)
}

// evalAfter reports whether the job evaluates after step steps (0: before
// the first).
func (c Config) evalAfter(step int) bool {
	return c.Eval != nil && c.EvalEvery > 0 && (step%c.EvalEvery == 0 || step == c.Steps)
}

// saveAfter reports whether the job saves a checkpoint after step steps.
func (c Config) saveAfter(step int) bool {
	return c.CheckpointDir != "" && (step == c.last() || (c.CheckpointEvery > 0 && step%c.CheckpointEvery == 0))
}

// last is the number of steps after which the job stops: Steps, or
// StopAfter when it is earlier.
func (c Config) last() int {
	if c.StopAfter > 0 {
		return min(c.Steps, c.StopAfter)
	}
	return c.Steps
}
