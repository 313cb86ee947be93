// Command mlp trains a small MLP with a pipeline schedule that ppgen
// generated ahead of time: four pipeline ranks, each running its straight-line
// rank function from the generated code, over an in-process or a TCP
// transport.
//
//	go run ./examples/mlp                        # 1f1b, 4 ranks in-process, 5 steps
//	go run ./examples/mlp -schedule zbv -check   # compare with sequential training
//	go run ./examples/mlp -transport tcp -check  # 4 OS processes on loopback
//	go run ./examples/mlp -schedule 1f1b-tie -check  # stages 0 and 3 share a layer (-tie 0:3)
//	go run ./examples/mlp -backend gonum -check      # the model on gonum's mat.Dense (gonum.go)
//	go run -tags nccl ./examples/mlp -transport nccl -check  # 4 processes, one GPU each (NCCL)
//	go run -tags nccl ./examples/mlp -transport nccl -dp 2 -schedule 1f1b-fsdp-swap -check  # 8 processes and GPUs, NCCL's collectives
//
//	go build -tags mpi -o mlp ./examples/mlp     # over MPI (needs an MPI)
//	mpirun -np 4 ./mlp -transport mpi -check     # add -mpi-sync for rendezvous sends
//	mpirun -np 8 ./mlp -transport mpi -dp 2 -schedule 1f1b-fsdp-swap -check  # PP × DP
//
// With -transport tcp (or nccl) and no launcher's variables in the
// environment (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID: see
// launch.FromEnv), the command launches four copies of itself with RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (as torchrun does) and waits
// for them; with them set (torchrun, mpirun, srun) it runs that one rank.
// -check trains the same model sequentially on the same micro-batches
// and reports the largest relative difference in losses and parameters.
//
// With -transport mpi the ranks are the processes mpirun (or srun) started:
// each takes its rank and the world size from MPI; -mpi-sync makes every
// send synchronous (MPI_Issend), the rendezvous semantics the schedules are
// verified under. A binary built without -tags mpi refuses -transport mpi
// (exit status 2), and one without -tags nccl -transport nccl.
//
// It trains through the training loop runtime/train (job: train.Run opens
// the world by name with runtime/world, builds each rank's stages from the
// model's layers, one per stage of one model copy, and runs -dp's
// replicas, plain or FSDP), and -check compares with train.Reference; this
// package holds the model and its data (model.go, gonum.go), the
// schedules and the flags.
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/examples/internal/compare"
	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/mesh"
	"github.com/ppgen/ppgen/runtime/metrics"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/swap"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/world"
)

type options struct {
	schedule  string
	transport string
	mpiSync   bool // -mpi-sync: synchronous sends over MPI
	steps     int
	check     bool
	dtype     string
	lr        float64
	seed      uint64
	interpret bool
	delay     time.Duration
	timeout   time.Duration // -timeout: the transport's progress timeout; 0 keeps PPGEN_TIMEOUT or the default
	swapTier  string
	trace     string            // -trace: write the last step's measured timeline here (in-process)
	wide      int               // -wide: the first and last blocks this many times wider (model.go)
	wideWait  time.Duration     // -wide-wait: each call of those blocks also waits this long
	timing    bool              // -timing: print the median iteration time (in-process)
	dp        int               // -dp: data-parallel replicas
	coll      string            // -collectives: member-order, native or sendrecv
	backend   string            // -backend: nn (runtime/nn on gorgonia tensors) or gonum (gonum.go)
	trained   *[]*nn.Param      // tests: the trained parameters of one model copy, layer by layer, as far as this process holds them
	config    map[string]string // the flags every rank must share (world.Options.Config)
}

func main() {
	var o options
	fs := flag.NewFlagSet("mlp", flag.ContinueOnError)
	fs.StringVar(&o.schedule, "schedule", "1f1b", "generated schedule to run: "+strings.Join(scheduleNames(), ", "))
	fs.StringVar(&o.transport, "transport", "inproc", "inproc (goroutines), tcp (one OS process per rank), mpi (the processes of mpirun -np N; needs a build with -tags mpi) or nccl (one process and GPU per rank; build with -tags nccl)")
	fs.BoolVar(&o.mpiSync, "mpi-sync", false, "with -transport mpi: synchronous sends (MPI_Issend), the rendezvous semantics the schedules are verified under")
	fs.IntVar(&o.steps, "steps", 5, "training steps")
	fs.BoolVar(&o.check, "check", false, "also train sequentially on the same micro-batches and compare losses and parameters")
	fs.StringVar(&o.dtype, "dtype", "float64", "float64 or float32")
	fs.Float64Var(&o.lr, "lr", 0.1, "SGD learning rate")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the model's initial weights and the synthetic data")
	fs.BoolVar(&o.interpret, "interpret", false, "run the schedule through the interpreter (pipe.Interpret) instead of the generated functions")
	fs.DurationVar(&o.delay, "step-delay", 0, "sleep this long between steps (for failure-injection tests)")
	fs.DurationVar(&o.timeout, "timeout", 0, fmt.Sprintf("fail a send or receive that makes no progress for this long (0: PPGEN_TIMEOUT, else %v)", transport.DefaultTimeout))
	fs.StringVar(&o.trace, "trace", "", "in-process: write the last step's measured timeline (each stage call's start and end) to this file as a Chrome trace, to compare with `ppgen trace` of the schedule")
	fs.IntVar(&o.wide, "wide", 0, "make the first and the last block wide (an inner layer of N times the hidden width: some 2N times a block's work), a deliberately uneven model; 0: all blocks alike")
	fs.DurationVar(&o.wideWait, "wide-wait", 0, "each forward and input-gradient call (F, I) of the first and the last block also waits this long, as a host waits for its accelerator: an uneven model whose ranks overlap on any number of cores")
	fs.BoolVar(&o.timing, "timing", false, "in-process: print the median time of an iteration (steps after the first)")
	fs.StringVar(&o.swapTier, "swap-tier", "host", "where schedules with swap steps offload activations: host (host buffers), file (files under the temporary directory) or none (the steps do nothing)")
	fs.IntVar(&o.dp, "dp", 1, "data-parallel replicas of the pipeline: world = ranks × N (FSDP for schedules with FSDP steps, else gradients all-reduced at OPT_STEP)")
	fs.StringVar(&o.backend, "backend", "nn", "the array library the model runs on: nn (runtime/nn's layers on gorgonia tensors) or gonum (the same model on gonum's mat.Dense, through the runtime's value adapters: float64, no -dp)")
	fs.StringVar(&o.coll, "collectives", "member-order", "with -dp: member-order (the transport's own data movement where it has collectives, MPI's or NCCL's, with the sums in member order: bit-identical to sequential training), native (the transport's own collectives, sums included: faster, float32 within 1e-4 beyond two replicas) or sendrecv (runtime/collective's algorithms over Send and Recv)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	// Every rank of a job must run these flags' values (compared at
	// world.Open); the progress timeout and the local outputs may differ.
	o.config = world.FlagConfig(fs, "timeout", "trace", "timing")
	if o.timeout < 0 {
		fmt.Fprintf(os.Stderr, "mlp: -timeout %v is negative; want a duration such as 30s, or 0 for PPGEN_TIMEOUT or the default %v\n", o.timeout, transport.DefaultTimeout)
		os.Exit(2)
	}
	if o.wideWait < 0 || o.wideWait > time.Second {
		fmt.Fprintf(os.Stderr, "mlp: -wide-wait %v; want 0 up to 1s\n", o.wideWait)
		os.Exit(2)
	}
	if o.wide < 0 || o.wide > 1024 {
		fmt.Fprintf(os.Stderr, "mlp: -wide %d; want 0 (all blocks alike) up to 1024\n", o.wide)
		os.Exit(2)
	}
	if o.mpiSync && o.transport != "mpi" {
		fmt.Fprintf(os.Stderr, "mlp: -mpi-sync needs -transport mpi (not %s)\n", o.transport)
		os.Exit(2)
	}
	if err := o.checkBackend(); err != nil {
		fmt.Fprintf(os.Stderr, "mlp: %v\n", err)
		os.Exit(2)
	}
	if err := world.Check(o.transport); err != nil {
		// An unknown name, or an engine this binary was built without.
		fmt.Fprintf(os.Stderr, "mlp: -transport %s: %v\n", o.transport, err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := run(o, os.Stdout, logger); err != nil {
		fmt.Fprintln(os.Stderr, "mlp:", err)
		os.Exit(1)
	}
}

func (o options) dt() (tensor.Dtype, error) {
	switch o.dtype {
	case "float64":
		return tensor.Float64, nil
	case "float32":
		return tensor.Float32, nil
	}
	return tensor.Dtype{}, fmt.Errorf("-dtype %q; want float64 or float32", o.dtype)
}

// checkBackend checks -backend and what it allows.
func (o options) checkBackend() error {
	switch o.backend {
	case "nn", "":
		return nil
	case "gonum":
		if o.dtype != "float64" {
			return fmt.Errorf("-backend gonum trains in float64 (gonum's mat.Dense), not -dtype %s", o.dtype)
		}
		if o.dp != 1 && o.dp != 0 {
			return fmt.Errorf("-backend gonum runs one pipeline; -dp %d needs -backend nn", o.dp)
		}
		return nil
	}
	return fmt.Errorf("-backend %q; want nn or gonum", o.backend)
}

// onBackend is " on gonum" for -backend gonum, else empty.
func (o options) onBackend() string {
	if o.backend == "gonum" {
		return " on gonum"
	}
	return ""
}

// tolerance is the correctness bar of docs/design.md §10.
func (o options) tolerance() float64 {
	if o.backend == "gonum" {
		// The gonum model's layers round apart from runtime/nn's (mat.Mul
		// then the bias, Add after the weight-gradient product: other
		// summation orders than nn's GEMM with the bias and gradient
		// inside), so against nn's sequential reference the parameters
		// differ by rounding, up to 5.1e-12 relative on the smallest ones
		// (seeds 1-5 and 7, 1f1b, zbv, dualpipe, 1f1b-tie; losses 3.4e-16).
		// The pipeline itself adds none: it trains the gonum model to the
		// bits of sequential gonum training (TestGonumPipelineIsSequential),
		// whatever the schedule (TestGonumSchedulesAgree).
		return 1e-10
	}
	if o.dtype == "float32" {
		if sc, err := lookup(o.schedule); err == nil && sc.Spec.Copies > 1 {
			// Two model copies sum their gradients as (copy A's) + (copy
			// B's), sequential training micro-batch by micro-batch: the
			// same in real arithmetic, but float32 rounds the two
			// associations apart, up to ~1e-4 relative on the smallest
			// parameters (seeds 1, 2, 3, 11: 1.8e-5 to 8.8e-5).
			return 1e-3
		}
		return 1e-5
	}
	return 1e-12
}

// hasSwap reports whether the schedule holds swap steps (read from its
// -table program; a schedule generated without -table is taken as holding none).
func hasSwap(sc schedule) bool {
	for _, ops := range sc.Program {
		for _, op := range ops {
			if op.Kind == pipe.OpSwapLaunchOffload {
				return true
			}
		}
	}
	return false
}

// newTier returns the swap tier -swap-tier names, nil for none.
func newTier(o options) (*swap.Tier, error) {
	switch o.swapTier {
	case "host", "": // "": the flag's default, for options built in code
		return swap.NewHost(), nil
	case "file":
		return swap.NewFile(os.TempDir())
	case "none":
		return nil, nil
	}
	return nil, fmt.Errorf("-swap-tier %q; want host, file or none", o.swapTier)
}

// swapReport is one line on what rank r's swap tier t did.
func swapReport(r int, t *swap.Tier) string {
	s := t.Stats()
	return fmt.Sprintf("rank %d swap (%s): %d offloads, %d loads, peak %d chunks (%d bytes) resident", r, t, s.Offloads, s.Loads, s.PeakResidentChunks, s.PeakResidentBytes)
}

// writeTrace writes tl's recorded calls as a Chrome trace to path: into a
// temporary file beside it, renamed over path once complete, so a failed
// write leaves no partial trace.
func writeTrace(path string, tl *pipe.Timeline, schedule string, program [][]pipe.Op) error {
	var buf bytes.Buffer
	if err := tl.WriteTrace(&buf, schedule, program); err != nil {
		return fmt.Errorf("-trace %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("-trace %s: cannot write in its directory %s: %w", path, filepath.Dir(path), errors.Unwrap(err))
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return fmt.Errorf("-trace %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-trace %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("-trace: %w", err)
	}
	return nil
}

// medianTime is the median of ts (the upper one of an even count; 0 for none).
func medianTime(ts []time.Duration) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	s := slices.Clone(ts)
	slices.Sort(s)
	return s[len(s)/2]
}

func report(out io.Writer, o options, lossDiff, paramDiff float64) error {
	return compare.Report(out, o.tolerance(), lossDiff, paramDiff)
}

// runInProc trains o's job with every rank a goroutine of this process
// (-dp 0 taken as 1).
func runInProc(o options, out io.Writer) error {
	o.transport, o.dp = "inproc", max(o.dp, 1)
	return run(o, out, slog.New(slog.DiscardHandler))
}

// run trains o's job: every rank in-process (-transport inproc), else this
// process's rank of -transport's world, launching one process per rank
// first when no launcher did (tcp, nccl).
func run(o options, out io.Writer, logger *slog.Logger) error {
	sc, err := lookup(o.schedule)
	if err != nil {
		return err
	}
	m, err := mesh.New(sc.Spec.Ranks, o.dp)
	if err != nil {
		return fmt.Errorf("-dp %d: %w", o.dp, err)
	}
	switch {
	case o.trace != "" && m.DP > 1:
		return fmt.Errorf("-trace is not recorded with -dp %d; drop one", o.dp)
	case o.trace != "" && o.transport != "inproc":
		return fmt.Errorf("-trace records the in-process run; with -transport %s each rank is its own process", o.transport)
	case o.transport != "inproc" && world.SelfLaunch(o.transport):
		return launch.Self(m.World(), launch.LocalOptions{Logger: logger})
	}
	res, err := job(o, sc, m, out, logger)
	if err == nil && o.trained != nil {
		*o.trained = nil
		for _, i := range slices.Sorted(maps.Keys(res.Layers)) {
			*o.trained = append(*o.trained, res.Layers[i]...)
		}
	}
	return err
}

// job trains mesh m (sc's pipeline times -dp replicas) with runtime/train
// and prints what the ranks of this process report: the steps' losses
// (world rank 0), with -dp the ranks' memory, their swap tiers, and with
// -check the comparison with train.Reference.
func job(o options, sc schedule, m mesh.Mesh, out io.Writer, logger *slog.Logger) (*train.Result, error) {
	sp := sc.Spec
	dt, err := o.dt()
	if err != nil {
		return nil, err
	}
	c := o.trainConfig(sc, dt, m.DP)
	c.FSDP = m.DP > 1 && hasFSDP(sc) // one pipeline: the FSDP steps pass
	c.World = o.transport
	note := fmt.Sprintf("schedule %s has %d ranks", o.schedule, sp.Ranks)
	if m.DP > 1 {
		note = fmt.Sprintf("schedule %s has %d ranks and -dp %d makes %d", o.schedule, sp.Ranks, m.DP, m.World())
	}
	c.WorldOptions = world.Options{SizeNote: note, Timeout: o.timeout, Sync: o.mpiSync, Collectives: o.coll, Logger: logger, Config: o.config}
	ts := &train.SwapTiers{New: func() (*swap.Tier, error) { return newTier(o) }}
	defer ts.Close()
	switch {
	case o.backend == "gonum":
		o.onGonum(&c)
	case hasSwap(sc):
		c.WrapStage = ts.Wrap
	}
	if o.trace != "" {
		c.Timeline = &pipe.Timeline{}
	}
	c.Hooks.AfterStep = func(rank int, r metrics.Record) error {
		if rank == 0 {
			fmt.Fprintf(out, "step %d loss %.6f\n", r.Step-1, r.Loss)
		}
		if o.delay > 0 {
			time.Sleep(o.delay)
		}
		return nil
	}
	if o.transport == "inproc" {
		fmt.Fprint(out, header(o, sc, m))
	}
	res, err := train.Run(context.Background(), c)
	if err != nil {
		return nil, err
	}
	ranks := slices.Sorted(maps.Keys(res.Ranks))
	for _, w := range ranks {
		if rep := res.Ranks[w]; m.DP > 1 {
			mode := map[bool]string{false: "data parallel", true: "FSDP"}[c.FSDP]
			fmt.Fprintf(out, "rank %d (pp %d, dp %d) %s memory: %v\n", w, rep.Pipe, rep.Replica, mode, rep.Memory)
		}
	}
	for _, w := range ranks {
		if t := ts.Tier(w); t != nil {
			fmt.Fprintln(out, swapReport(w, t))
		}
	}
	native := false
	for _, w := range ranks {
		if rep := res.Ranks[w]; rep.NativeDP {
			native = true
			fmt.Fprintf(out, "rank %d: dp group %d's collectives are the transport's own (-collectives %s)\n", w, rep.Pipe, cmp.Or(o.coll, "member-order"))
		}
	}
	if o.timing {
		var times []time.Duration
		for _, r := range res.Records {
			times = append(times, time.Duration(r.StepSeconds*float64(time.Second)))
		}
		med := medianTime(times[min(1, len(times)-1):])
		fmt.Fprintf(out, "iteration: median %.3f ms over steps 1-%d\n", float64(med.Nanoseconds())/1e6, len(times)-1)
	}
	if c.Timeline != nil {
		if err := writeTrace(o.trace, c.Timeline, sp.Schedule, sc.Program); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "wrote %s: the last step's measured timeline\n", o.trace)
	}
	if !o.check {
		return res, nil
	}
	// The reference is runtime/nn's model, whatever -backend trained.
	ref, err := train.Reference(o.trainConfig(sc, dt, m.DP))
	if err != nil {
		return nil, err
	}
	lossDiff := 0.0
	for i, r := range res.Records {
		lossDiff = math.Max(lossDiff, compare.RelDiff(r.Loss, ref.Records[i].Loss))
	}
	paramDiff, err := compare.Layers(res.Layers, ref.Layers)
	if err != nil {
		return nil, err
	}
	return res, compare.Report(out, o.dpTolerance(native && o.coll != "member-order", m.DP), lossDiff, paramDiff)
}

// header is the first line of an in-process run.
func header(o options, sc schedule, m mesh.Mesh) string {
	sp := sc.Spec
	if m.DP == 1 {
		return fmt.Sprintf("schedule %s: %d ranks, %d stages, %d micro-batches of %d rows, %s%s, in-process\n", o.schedule, sp.Ranks, sp.Stages, sp.Micro, microRows, o.dtype, o.onBackend())
	}
	mode := "plain data parallel (gradients all-reduced at OPT_STEP)"
	if hasFSDP(sc) {
		mode = "FSDP (stages sharded over each DP group)"
	}
	return fmt.Sprintf("schedule %s: %d ranks × dp %d = %d, %d stages, %d×%d micro-batches of %d rows, %s, %s, %s\n",
		o.schedule, sp.Ranks, m.DP, m.World(), sp.Stages, m.DP, sp.Micro, microRows, o.dtype, mode, "in-process")
}

// hasFSDP reports whether the schedule holds FSDP steps (read from its
// -table program).
func hasFSDP(sc schedule) bool {
	for _, ops := range sc.Program {
		for _, op := range ops {
			if op.Kind == pipe.OpUnshard || op.Kind == pipe.OpReduceGrad {
				return true
			}
		}
	}
	return false
}

// share is replica d's view of the global batch: its micro-batch m is the
// global micro-batch d·M + m.
type share struct {
	global *batches
	off    int
}

func (s share) Input(m int) (*tensor.Dense, error)  { return s.global.Input(s.off + m) }
func (s share) Target(m int) (*tensor.Dense, error) { return s.global.Target(s.off + m) }

// dpTolerance is -check's tolerance for a -dp run: o.tolerance(), except
// for float32 with the engine's own sums (engineSums: MPI's, -collectives
// native) over
// more than two members: they sum in the engine's order, not the replica
// order of the reference, and float32 rounds the two associations apart by
// more than 1e-5 relative on the smallest parameters (measured at -dp 4
// over MPI, 3 steps: 4.6e-5, 2.2e-5 and 3.2e-5 with seeds 1, 2, 3), so it is
// held to 1e-4 there. float64 stays at 1e-12 (measured 9.2e-14), two members
// sum a + b either way (bit-identical), and -collectives member-order and
// sendrecv are the reference's order at any -dp (bit-identical).
func (o options) dpTolerance(engineSums bool, dp int) float64 {
	if engineSums && dp > 2 && o.dtype == "float32" {
		return max(o.tolerance(), 1e-4)
	}
	return o.tolerance()
}
