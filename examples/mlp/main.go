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
//	mpirun -np 8 ./mlp -transport mpi -dp 2 -schedule 1f1b-fsdp-swap -check  # PP × DP (dp.go)
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
// Every transport is opened by name with runtime/world (openWorld).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/swap"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/value/gonumvalue"
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
	timeline  *pipe.Timeline    // set by runInProc when trace is
	wide      int               // -wide: the first and last blocks this many times wider (model.go)
	wideWait  time.Duration     // -wide-wait: each call of those blocks also waits this long
	timing    bool              // -timing: print the median iteration time (in-process)
	dp        int               // -dp: data-parallel replicas (dp.go)
	coll      string            // -collectives: member-order, native or sendrecv (dp.go)
	backend   string            // -backend: nn (runtime/nn on gorgonia tensors) or gonum (gonum.go)
	trained   *[]*nn.Sequential // tests: runInProc leaves the trained model here (-backend gonum: its weights stored back)
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
	fs.IntVar(&o.dp, "dp", 1, "data-parallel replicas of the pipeline: world = ranks × N (FSDP for schedules with FSDP steps, else gradients all-reduced at OPT_STEP; see dp.go)")
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
	var err error
	switch {
	case o.dp != 1:
		err = runDP(o, os.Stdout, logger)
	case o.transport == "inproc":
		err = runInProc(o, os.Stdout)
	case o.trace != "" && o.transport != "inproc":
		err = fmt.Errorf("-trace records the in-process run; with -transport %s each rank is its own process", o.transport)
	case world.SelfLaunch(o.transport):
		err = launchSelf(o, logger)
	default:
		err = runRank(o, os.Stdout, logger)
	}
	if err != nil {
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

// rankState is one rank's share of the model and its executor.
type rankState struct {
	x      *pipe.Exec
	stages []*nn.Sequential // the stages this rank holds, in stage order
	gonum  []*gStage        // with -backend gonum, their mirrors on mat.Dense, which train
	run    func(*pipe.Exec) error
	tier   *swap.Tier // where its stages offload activations; nil without swap steps
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

// swapReport is one line on what rank r's swap tier did.
func (st *rankState) swapReport(r int) string { return swapReport(r, st.tier) }

// swapReport is one line on what rank r's swap tier t did.
func swapReport(r int, t *swap.Tier) string {
	s := t.Stats()
	return fmt.Sprintf("rank %d swap (%s): %d offloads, %d loads, peak %d chunks (%d bytes) resident", r, t, s.Offloads, s.Loads, s.PeakResidentChunks, s.PeakResidentBytes)
}

func (st *rankState) close() {
	st.x.Close()
	if st.tier != nil {
		st.tier.Close()
	}
}

// newRank builds rank r's executor over tr, with its stages taken from the
// full model (every rank builds the model from the same seed and keeps its part).
func newRank(o options, sc schedule, r int, model []*nn.Sequential, data *batches, tr transport.Transport) (*rankState, error) {
	sp := sc.Spec
	st := &rankState{run: sc.Ranks[r]}
	if hasSwap(sc) {
		var err error
		if st.tier, err = newTier(o); err != nil {
			return nil, err
		}
	}
	held := map[int]pipe.Stage{}
	for s, rr := range sp.RankOf {
		if rr == r {
			held[s] = model[s]
			if st.tier != nil {
				// Offload the saved activations at SWAP_LAUNCH_OFFLOAD.
				held[s] = &nn.Swapping{Sequential: model[s], Tier: st.tier, Name: fmt.Sprintf("stage %d", s)}
			}
			if lin := tiedLayer(sp, s, model[s]); lin != nil {
				// A stage of a tie: TIE_GRAD sums its copy's gradients
				// with the other stage's (pipe.Tied).
				ts, err := nn.Tie(model[s], lin.Weight, lin.Bias)
				if err != nil {
					return nil, err
				}
				held[s] = ts
			}
			if o.backend == "gonum" {
				gs, g, err := gonumStage(sp, s, model[s])
				if err != nil {
					return nil, err
				}
				held[s] = gs
				st.gonum = append(st.gonum, g)
			}
			st.stages = append(st.stages, model[s])
		}
	}
	if o.interpret {
		if sc.Program == nil {
			return nil, fmt.Errorf("-interpret: schedule %q was generated without -table", o.schedule)
		}
		ops := sc.Program[r]
		st.run = func(x *pipe.Exec) error { return pipe.Interpret(x, ops) }
	}
	ps := params(st.stages)
	opt := &nn.SGD{LR: o.lr}
	var src pipe.DataSource
	if sp.ReadsData(r) {
		src = data // the other ranks get none: the runtime must not need it
	}
	var loss pipe.Loss = nn.MSE{Scale: 1 / float64(sp.Micro)}
	optStep := func() error {
		if err := opt.Step(ps); err != nil {
			return err
		}
		nn.ZeroGrad(ps)
		return nil
	}
	if o.backend == "gonum" {
		loss = pipe.FromValuesLoss(gMSE{scale: 1 / float64(sp.Micro)}, gonumvalue.Maker{})
		if src != nil {
			src = pipe.FromValuesData(gBatches{data})
		}
		optStep = func() error { gSGD(st.gonum, o.lr); return nil }
	}
	x, err := pipe.New(pipe.Config{
		Rank: r, Spec: sp, Stages: held, Transport: tr,
		Loss:     loss,
		Data:     src,
		Timeline: o.timeline,
		OptStep:  optStep,
	})
	if err != nil {
		if st.tier != nil {
			st.tier.Close()
		}
		return nil, err
	}
	st.x = x
	return st, nil
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

func sum(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t
}

// runInProc trains with every rank as a goroutine of this process.
func runInProc(o options, out io.Writer) error {
	sc, err := lookup(o.schedule)
	if err != nil {
		return err
	}
	dt, err := o.dt()
	if err != nil {
		return err
	}
	sp := sc.Spec
	model, err := buildPipelineStages(sp, dt, o.seed, o.widen())
	if err != nil {
		return err
	}
	data := newBatches(dt, o.seed, sp.Micro)
	if o.trace != "" {
		o.timeline = &pipe.Timeline{}
	}
	w, err := openWorld("inproc", o, sp, sp.Ranks, "", nil)
	if err != nil {
		return err
	}
	defer w.Close()
	trs := w.Endpoints
	ranks := make([]*rankState, sp.Ranks)
	xs := make([]*pipe.Exec, sp.Ranks)
	fns := make([]func(*pipe.Exec) error, sp.Ranks)
	for r := range ranks {
		if ranks[r], err = newRank(o, sc, r, model, data, trs[r]); err != nil {
			return err
		}
		xs[r], fns[r] = ranks[r].x, ranks[r].run
		defer ranks[r].close()
	}
	fmt.Fprintf(out, "schedule %s: %d ranks, %d stages, %d micro-batches of %d rows, %s%s, in-process\n", o.schedule, sp.Ranks, sp.Stages, sp.Micro, microRows, o.dtype, o.onBackend())
	var losses []float64
	var times []time.Duration
	for step := range o.steps {
		data.setStep(step)
		for _, x := range xs {
			x.Reset()
		}
		if o.timeline != nil {
			o.timeline.Reset() // keep the last step's
		}
		start := time.Now()
		if err := pipe.RunAll(xs, fns); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		times = append(times, time.Since(start))
		// Each micro-batch's loss is on the rank holding the last stage of
		// its route (of its model copy, for dualpipe).
		l := 0.0
		for m := range sp.Micro {
			l += xs[sp.RankOf[routeLast(sp, m)]].Losses()[m]
		}
		losses = append(losses, l)
		fmt.Fprintf(out, "step %d loss %.6f\n", step, l)
	}
	for r, st := range ranks {
		if st.tier != nil {
			fmt.Fprintln(out, st.swapReport(r))
		}
	}
	if o.timing {
		med := medianTime(times[min(1, len(times)-1):])
		fmt.Fprintf(out, "iteration: median %.3f ms over steps 1-%d\n", float64(med.Nanoseconds())/1e6, len(times)-1)
	}
	if o.timeline != nil {
		if err := writeTrace(o.trace, o.timeline, sp.Schedule, sc.Program); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s: the last step's measured timeline\n", o.trace)
	}
	for _, st := range ranks {
		store(st.gonum) // -backend gonum: the trained weights, for the comparison
	}
	if o.trained != nil {
		*o.trained = model
	}
	if !o.check {
		return nil
	}
	ref, refLosses, err := sequentialReference(o, sp, dt)
	if err != nil {
		return err
	}
	lossDiff := 0.0
	for i := range losses {
		lossDiff = math.Max(lossDiff, relDiff(losses[i], sum(refLosses[i])))
	}
	paramDiff, err := maxRelDiff(params(model), params(twins(sp, ref)))
	if err != nil {
		return err
	}
	return report(out, o, lossDiff, paramDiff)
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

// sequentialReference trains the model of sp (one copy's stages) without a
// pipeline; the losses are per step and micro-batch.
func sequentialReference(o options, sp pipe.Spec, dt tensor.Dtype) ([]*nn.Sequential, [][]float64, error) {
	ref, err := buildTiedStages(stagesPerCopy(sp), dt, o.seed, sp.Ties, tieShared, o.widen())
	if err != nil {
		return nil, nil, err
	}
	refData := newBatches(dt, o.seed, catalogMicro(o))
	losses, err := trainSequential(ref, refData, &nn.SGD{LR: o.lr}, nn.MSE{Scale: 1 / float64(catalogMicro(o))}, o.steps)
	return ref, losses, err
}

func catalogMicro(o options) int {
	sc, _ := lookup(o.schedule)
	return sc.Spec.Micro
}

func report(out io.Writer, o options, lossDiff, paramDiff float64) error {
	return reportTol(out, o.tolerance(), lossDiff, paramDiff)
}

// reportTol is report against tolerance tol.
func reportTol(out io.Writer, tol, lossDiff, paramDiff float64) error {
	fmt.Fprintf(out, "check: max relative difference vs sequential training: loss %.3g, parameters %.3g (tolerance %g)\n", lossDiff, paramDiff, tol)
	if lossDiff > tol || paramDiff > tol {
		return fmt.Errorf("pipeline training differs from sequential training beyond %g", tol)
	}
	return nil
}

// openWorld opens the world of transport name (-transport, or "inproc" for
// the in-process runs) for a job of size ranks (sp's, times -dp's
// replicas; note says so in a refusal, default "schedule S has N ranks"):
// over "inproc" every rank, else this process's one, from the launcher's
// environment (tcp, nccl) or MPI's.
func openWorld(name string, o options, sp pipe.Spec, size int, note string, logger *slog.Logger) (*world.World, error) {
	if note == "" {
		note = fmt.Sprintf("schedule %s has %d ranks", o.schedule, sp.Ranks)
	}
	return world.Open(context.Background(), name, world.Options{
		Size: size, SizeNote: note,
		Fingerprint: sp.Fingerprint, Schedule: sp.Describe(),
		Timeout: o.timeout, Sync: o.mpiSync, Collectives: o.coll, Logger: logger,
		Config: o.config,
	})
}

// runRank runs this process's rank of a multi-process job over
// -transport's world (tcp, nccl: the rank the environment names; mpi:
// MPI's).
func runRank(o options, out io.Writer, logger *slog.Logger) error {
	sc, err := lookup(o.schedule)
	if err != nil {
		return err
	}
	dt, err := o.dt()
	if err != nil {
		return err
	}
	w, err := openWorld(o.transport, o, sc.Spec, sc.Spec.Ranks, "", logger)
	if err != nil {
		return err
	}
	// A failed step has aborted the world already; after a failed -check
	// every rank still reaches Close (MPI's waits for every rank).
	if err := trainRank(o, sc, dt, w.Endpoint(), out); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// trainRank trains tr's rank of the pipeline.
func trainRank(o options, sc schedule, dt tensor.Dtype, tr transport.Transport, out io.Writer) error {
	sp := sc.Spec
	rank := tr.Rank()
	model, err := buildPipelineStages(sp, dt, o.seed, o.widen())
	if err != nil {
		return err
	}
	data := newBatches(dt, o.seed, sp.Micro)
	rs, err := newRank(o, sc, rank, model, data, tr)
	if err != nil {
		return err
	}
	defer rs.close()
	// The micro-batches whose loss this rank computes: those whose route
	// ends on it (all of them on the last stage's rank, for one pipeline).
	var mineMicro []int
	for m := range sp.Micro {
		if sp.RankOf[routeLast(sp, m)] == rank {
			mineMicro = append(mineMicro, m)
		}
	}
	part := ""
	if len(mineMicro) > 0 && len(mineMicro) < sp.Micro {
		part = fmt.Sprintf(" (micro-batches %d-%d)", mineMicro[0], mineMicro[len(mineMicro)-1])
	}
	var losses [][]float64
	for step := range o.steps {
		data.setStep(step)
		rs.x.Reset()
		if err := pipe.Run(rs.x, rs.run); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if len(mineMicro) > 0 {
			all := rs.x.Losses()
			var l float64
			var ls []float64
			for _, m := range mineMicro {
				l += all[m]
				ls = append(ls, all[m])
			}
			losses = append(losses, ls)
			fmt.Fprintf(out, "step %d loss %.6f%s\n", step, l, part)
		}
		if o.delay > 0 {
			time.Sleep(o.delay)
		}
	}
	if rs.tier != nil {
		fmt.Fprintln(out, rs.swapReport(rank))
	}
	if !o.check {
		return nil
	}
	store(rs.gonum) // -backend gonum: the trained weights, for the comparison
	ref, refLosses, err := sequentialReference(o, sp, dt)
	if err != nil {
		return err
	}
	var mine, theirs []*nn.Sequential
	refStages := twins(sp, ref)
	for s, rr := range sp.RankOf {
		if rr == rank {
			mine, theirs = append(mine, model[s]), append(theirs, refStages[s])
		}
	}
	paramDiff, err := maxRelDiff(params(mine), params(theirs))
	if err != nil {
		return err
	}
	lossDiff := 0.0
	for i := range losses {
		for k, m := range mineMicro {
			lossDiff = math.Max(lossDiff, relDiff(losses[i][k], refLosses[i][m]))
		}
	}
	return report(out, o, lossDiff, paramDiff)
}

// launchSelf starts one process per rank of this same command (launch.Self).
func launchSelf(o options, logger *slog.Logger) error {
	sc, err := lookup(o.schedule)
	if err != nil {
		return err
	}
	return launch.Self(sc.Spec.Ranks, launch.LocalOptions{Logger: logger})
}
