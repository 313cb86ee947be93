// Command charlm trains a small GPT-style character model with a pipeline
// schedule that ppgen generated ahead of time, on Go source text sampled
// from the Go installation's own source tree ($GOROOT/src: every machine
// with Go has it; nothing is downloaded), through runtime/train.
//
//	go run ./examples/charlm                        # zbv, 4 ranks in-process, ~2 minutes on 2 cores
//	go run ./examples/charlm -check                 # 5 steps, compared with sequential training
//	go run ./examples/charlm -transport tcp -check  # 4 OS processes on loopback, the same
//	go run ./examples/charlm -svg loss.svg          # the loss curve
//	go run ./examples/charlm prepare -out DIR       # write the text as token shards (runtime/data)
//	go run ./examples/charlm -data DIR -metrics m.jsonl -ckpt ck -ckpt-every 10
//	go run ./examples/charlm -data DIR -resume ck   # continue from the checkpoint
//	go run ./examples/charlm -realise               # measured steps against the simulated makespan
//
// The model: a token and position embedding, -blocks pre-norm transformer
// blocks (causal multi-head self-attention and a GELU MLP, each in a
// residual), an RMSNorm and an LM head whose weight is the embedding's
// token table (-tie; a TiedHead: logits h·Tokenᵀ). runtime/train builds
// each rank's stages from its layers (model.go: layer 0 the embedding,
// 1..blocks the blocks, the last the norm and the head; split: the blocks
// as evenly as they go), the head holding its own copy of the token table:
// the training programs are generated with -tie 0:S-1, so the runtime's
// TIE_GRAD step sums the two copies' gradients before each optimizer step
// (on rank 0 for zbv, across ranks 0 and 3 for 1f1b) and they stay one
// parameter.
//
// The data are token shards (runtime/data): `charlm prepare -out DIR`
// writes them, -data DIR reads them; without -data they are prepared into
// a temporary directory first. Each step's windows are drawn from (-seed,
// step), so a resumed run reads what an uninterrupted one reads. The
// optimizer is AdamW (-wd) at a learning rate warmed up over -warmup steps
// to -lr and cosine-decayed to -min-lr at -steps, after clipping the
// gradients by their global norm (-clip), all runtime/train's.
//
// Validation runs the schedule's forward-only program (ppgen gen
// -forward-only -name Eval: program/zbv's EvalSpec and EvalRanks, beside
// the training program in one package, in the same world) over fixed
// windows of the validation shard and prints one line `validation loss X`
// before training, every -eval-every steps and at the end. -metrics writes
// one JSON line per step (docs/metrics.md); -ckpt saves checkpoints
// (docs/checkpoints.md) every -ckpt-every steps and at the end, -resume
// continues from one (under either schedule), -stop-after stops a job
// early as a preemption would. -check trains the same model sequentially,
// the tied table as one parameter, on the same micro-batches with the same
// optimizer, and requires the losses (training and validation) and the
// parameters of every layer this process holds to match within 1e-12 in
// float64. -dp N runs N data-parallel replicas of the pipeline (world =
// ranks × N), each on its share of N times the micro-batches (the
// sampler's global order: -check's reference trains on the whole global
// batch). -trace writes the last step's measured timeline (in-process).
// -realise (realise.go) trains -steps steps (6 unless given) in-process
// with a measured timeline and prints, for each step after the first, its
// wall time against gen/sim's makespan of the same program (the Program
// table, as runtime/train runs it: the norm's and the loss's reductions
// and the optimizer step included) at the costs gen/tune fits to that
// step's own trace, at the calls' medians and their means, with the gap
// split into the host work, compute variance and what the model does not
// see, and where each rank's time went.
// With -transport tcp and no launcher's variables in the environment the
// command launches four copies of itself (as examples/mlp does, through
// runtime/launch) and each runs one rank; rank 0 prints the losses. Both
// programs share the ranks' one TCP world, whose handshake checked both
// fingerprints, and run one after the other.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/world"
)

type options struct {
	schedule  string
	transport string
	steps     int
	evalEvery int
	logEvery  int
	check     bool
	tie       bool
	dtype     string
	lr        float64
	seed      uint64
	svg       string
	trace     string
	realise   bool   // -realise: the measured step against the simulated makespan
	metrics   string // -metrics: a JSONL file, or - for stdout
	data      string // -data: prepare's token shards; "" prepares them
	ckpt      string
	ckptEvery int
	stopAfter int
	dp        int // -dp: data-parallel replicas of the pipeline
	resume    string
	clip      float64
	minLR     float64
	warmup    int
	wd        float64
	goroot    string
	timeout   time.Duration
	sh        shape
	config    map[string]string // the flags every rank must share (world.Options.Config)
}

func defaultOptions() options {
	return options{schedule: "zbv", transport: "inproc", steps: 50, evalEvery: 10, logEvery: 10, tie: true,
		dtype: "float64", lr: 0.003, minLR: 0.0003, warmup: 5, wd: 0.01, clip: 1, seed: 1, dp: 1, sh: defaultShape}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "prepare" {
		if err := prepare(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "charlm prepare:", err)
			os.Exit(1)
		}
		return
	}
	o := defaultOptions()
	fs := flag.NewFlagSet("charlm", flag.ContinueOnError)
	fs.StringVar(&o.schedule, "schedule", o.schedule, "generated schedule to run: "+strings.Join(scheduleNames(), ", "))
	fs.StringVar(&o.transport, "transport", o.transport, "inproc (goroutines) or tcp (one OS process per rank)")
	fs.IntVar(&o.steps, "steps", o.steps, fmt.Sprintf("training steps (with -check, %d unless given)", checkSteps))
	fs.IntVar(&o.evalEvery, "eval-every", o.evalEvery, "evaluate the validation loss every N steps (and at the end)")
	fs.IntVar(&o.logEvery, "log-every", o.logEvery, "print the training loss every N steps (and at the end)")
	fs.BoolVar(&o.check, "check", false, "also train sequentially on the same micro-batches and require equal losses and parameters (float64: within 1e-12)")
	fs.BoolVar(&o.tie, "tie", o.tie, "tie the LM head to the token embedding (one parameter on the first and the last stage)")
	fs.StringVar(&o.dtype, "dtype", o.dtype, "float64 or float32")
	fs.Float64Var(&o.lr, "lr", o.lr, "AdamW's peak learning rate")
	fs.Float64Var(&o.minLR, "min-lr", o.minLR, "the learning rate the cosine decay ends at, after -steps")
	fs.IntVar(&o.warmup, "warmup", o.warmup, "linear warmup steps before the cosine decay")
	fs.Float64Var(&o.wd, "wd", o.wd, "AdamW's decoupled weight decay")
	fs.Float64Var(&o.clip, "clip", o.clip, "clip the gradients by their global L2 norm at this value (0: no clipping)")
	fs.StringVar(&o.data, "data", "", "directory of the token shards `charlm prepare` writes (default: prepare them from -goroot into a temporary directory)")
	fs.StringVar(&o.metrics, "metrics", "", "write one JSON line per step (docs/metrics.md) to this file, or - for stdout")
	fs.StringVar(&o.ckpt, "ckpt", "", "save checkpoints to this directory (docs/checkpoints.md): every -ckpt-every steps and at the end")
	fs.IntVar(&o.ckptEvery, "ckpt-every", 0, "with -ckpt: save every N steps (0: only at the end)")
	fs.IntVar(&o.dp, "dp", o.dp, "data-parallel replicas of the pipeline (world = ranks × N; each replica reads its share of N times the micro-batches)")
	fs.IntVar(&o.stopAfter, "stop-after", 0, "stop after N steps of the job, saving a checkpoint with -ckpt, as a preemption would (0: run all -steps)")
	fs.StringVar(&o.resume, "resume", "", "resume from the checkpoint in this directory (parameters, optimizer state, step, data position); -steps is the whole job's")
	fs.Uint64Var(&o.seed, "seed", o.seed, "seed of the initial weights and of the training windows")
	fs.StringVar(&o.svg, "svg", "", "write the loss curve (training and validation loss against step) to this SVG file")
	fs.StringVar(&o.trace, "trace", "", "in-process: write the last training step's measured timeline to this file as a Chrome trace")
	fs.BoolVar(&o.realise, "realise", false, "in-process: train -steps steps (6 unless given) with a measured timeline and print each step's wall time against the simulated makespan of the program at the costs ppgen tune fits to that step, and where each rank's time went")
	fs.StringVar(&o.goroot, "goroot", "", "the Go installation whose src/ is the text (default: `go env GOROOT`)")
	fs.DurationVar(&o.timeout, "timeout", 0, fmt.Sprintf("fail a send or receive that makes no progress for this long (0: PPGEN_TIMEOUT, else %v)", transport.DefaultTimeout))
	fs.IntVar(&o.sh.Dim, "dim", o.sh.Dim, "model width")
	fs.IntVar(&o.sh.Blocks, "blocks", o.sh.Blocks, "transformer blocks (at least the schedule's stages)")
	fs.IntVar(&o.sh.SeqLen, "seq", o.sh.SeqLen, "characters per sequence")
	fs.IntVar(&o.sh.Batch, "batch", o.sh.Batch, "sequences per micro-batch")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	// Every rank of a job must run these flags' values (compared at
	// world.Open); the progress timeout, the local outputs and the local
	// path of the text may differ.
	o.config = world.FlagConfig(fs, "timeout", "svg", "trace", "metrics", "goroot", "data", "ckpt", "resume")
	if o.check && !flagSet(fs, "steps") {
		o.steps = checkSteps
	}
	if o.realise && !flagSet(fs, "steps") {
		o.steps = realiseSteps
	}
	o.sh.Hidden = 4 * o.sh.Dim
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "charlm:", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var err error
	if o.realise {
		err = realise(o, os.Stdout)
	} else if world.SelfLaunch(o.transport) {
		err = launchSelf(o, logger)
	} else {
		err = run(o, os.Stdout, logger)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "charlm:", err)
		os.Exit(1)
	}
}

// checkSteps is -check's number of steps unless -steps is given: each
// TCP rank trains the whole sequential reference too.
const checkSteps = 5

// realiseSteps is -realise's number of steps unless -steps is given.
const realiseSteps = 6

// flagSet reports whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// validate checks the flags that need no data.
func (o options) validate() error {
	sc, err := lookup(o.schedule)
	if err != nil {
		return err
	}
	if _, err := o.dt(); err != nil {
		return err
	}
	switch {
	case o.transport != "inproc" && o.transport != "tcp":
		return fmt.Errorf("-transport %q; want inproc or tcp", o.transport)
	case o.trace != "" && o.transport != "inproc":
		return fmt.Errorf("-trace records the in-process run; with -transport %s each rank is its own process", o.transport)
	case o.steps < 0 || o.steps > 1_000_000:
		return fmt.Errorf("-steps %d; want 0..1000000", o.steps)
	case o.evalEvery < 1:
		return fmt.Errorf("-eval-every %d; want 1 or more", o.evalEvery)
	case o.logEvery < 1:
		return fmt.Errorf("-log-every %d; want 1 or more", o.logEvery)
	case !(o.lr > 0) || o.lr > 10:
		return fmt.Errorf("-lr %v; want a rate in (0, 10]", o.lr)
	case !(o.minLR >= 0) || o.minLR > o.lr:
		return fmt.Errorf("-min-lr %v; want a rate in [0, -lr %v]", o.minLR, o.lr)
	case o.warmup < 0 || !(o.wd >= 0) || o.wd > 1 || !(o.clip >= 0) || math.IsInf(o.clip, 0):
		return fmt.Errorf("-warmup %d, -wd %v, -clip %v; want a warmup of 0 steps or more, a weight decay in [0, 1] and a finite norm of 0 or more", o.warmup, o.wd, o.clip)
	case o.dp < 1 || o.dp > 64:
		return fmt.Errorf("-dp %d; want 1..64 replicas", o.dp)
	case o.stopAfter < 0:
		return fmt.Errorf("-stop-after %d; want 0 or more steps", o.stopAfter)
	case o.ckptEvery < 0 || (o.ckptEvery > 0 && o.ckpt == ""):
		return fmt.Errorf("-ckpt-every %d; want 0 or more, with -ckpt", o.ckptEvery)
	case o.timeout < 0:
		return fmt.Errorf("-timeout %v is negative; want a duration such as 30s, or 0", o.timeout)
	}
	return o.sh.check(sc.train.Spec.Stages)
}

// optimizer is AdamW with -wd (PyTorch's other defaults); the schedule
// sets its learning rate before every step.
func (o options) optimizer() nn.Optimizer {
	opt := nn.NewAdamW()
	opt.WeightDecay = o.wd
	return opt
}

// lrSchedule is the learning rate: -warmup steps of linear warmup to -lr,
// then a cosine decay to -min-lr after -steps.
func (o options) lrSchedule() nn.Schedule {
	return nn.CosineDecay{Peak: o.lr, Min: o.minLR, Warmup: o.warmupSteps(), Total: o.steps}
}

func (o options) warmupSteps() int { return min(o.warmup, o.steps) }

func (o options) dt() (tensor.Dtype, error) {
	switch o.dtype {
	case "float64":
		return tensor.Float64, nil
	case "float32":
		return tensor.Float32, nil
	}
	return tensor.Dtype{}, fmt.Errorf("-dtype %q; want float64 or float32", o.dtype)
}

// tolerance is -check's bar on the largest absolute difference of a loss
// or a parameter: docs/design.md §10's 1e-12 in float64; float32 rounds
// the tied copies' sum and the reference's single accumulation apart, and
// Adam's division carries it into the weights.
func (o options) tolerance() float64 {
	if o.dtype == "float32" {
		return 1e-4
	}
	return 1e-12
}

// report prints -check's line and fails beyond the tolerance. A negative
// lossDiff means this rank has no losses (they are on the last stage's).
func report(out io.Writer, tol, lossDiff, paramDiff float64) error {
	losses := fmt.Sprintf("loss %.3g", lossDiff)
	if lossDiff < 0 {
		losses = "losses on the last stage's rank"
	}
	fmt.Fprintf(out, "check: max abs difference vs sequential training: %s, parameters %.3g (tolerance %g)\n", losses, paramDiff, tol)
	if lossDiff > tol || paramDiff > tol {
		return errors.New("pipeline training differs from sequential training beyond the tolerance (above)")
	}
	return nil
}

// header prints what is trained on what.
func header(out io.Writer, o options, sc schedule, where string) error {
	sp := sc.train.Spec
	dt, _ := o.dt()
	m, err := newModel(o.sh, dt, o.seed, o.tie)
	if err != nil {
		return err
	}
	n := 0
	for _, p := range m.params() {
		n += p.Value.Shape().TotalSize()
	}
	head := map[bool]string{true: "tied head", false: "untied head"}[o.tie]
	replicas := ""
	if o.dp > 1 {
		replicas = fmt.Sprintf(" × %d replicas", o.dp)
	}
	fmt.Fprintf(out, "charlm: %s, %d ranks%s, %d stages, %d micro-batches of %d×%d characters; %d blocks of width %d, %d parameters, %s, %s, %s\n",
		sp.Schedule, sp.Ranks, replicas, sp.Stages, sp.Micro, o.sh.Batch, o.sh.SeqLen, o.sh.Blocks, o.sh.Dim, n, head, o.dtype, where)
	fmt.Fprintf(out, "optimizer: AdamW (weight decay %g), learning rate %g cosine-decayed to %g after %d warmup steps, clipping at norm %g\n",
		o.wd, o.lr, o.minLR, o.warmupSteps(), o.clip)
	return nil
}

// launchSelf starts one process per rank of this same command (launch.Self).
func launchSelf(o options, logger *slog.Logger) error {
	sc, err := lookup(o.schedule)
	if err != nil {
		return err
	}
	return launch.Self(sc.train.Spec.Ranks*o.dp, launch.LocalOptions{Logger: logger})
}
