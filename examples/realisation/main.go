// Command realisation measures how closely the real runtime realises the
// schedule the simulator predicts: it runs the committed catalog schedules
// (generated/onef1b and generated/interleaved, P=4, M=8; their generated
// straight-line rank functions) with the real runtime/pipe executor over the
// in-process and the TCP transport (four ranks in this process on
// 127.0.0.1), with stages that take fixed durations by waiting (F = 2 ms,
// B = 4 ms as I = 2 ms then W = 2 ms, per chunk) on 2x2 tensors so compute is
// negligible, and compares the measured iteration time with gen/sim's
// makespan of the same program at the same per-chunk costs and comm = 0.
//
//	go run ./examples/realisation                     # both schedules, both transports, 20 iterations
//	go run ./examples/realisation -transport tcp -iters 50
//	go build -tags mpi -o realisation ./examples/realisation && mpirun -np 4 ./realisation -transport mpi -schedule 1f1b
//
// A stage waits by deadline: it takes start = time.Now() on entry, sleeps
// until 500 µs before start+d on a timerfd (preciseSleep; time.Sleep and
// 1 ms where there is none) and yields (runtime.Gosched) until start+d,
// recording by how much it overshot the deadline. time.Sleep alone is as
// precise as the Go timer: on Linux the Go runtime sleeps in epoll_pwait,
// whose timeout has millisecond granularity, and the kernel adds its timer
// slack (more under virtualisation), so a 2 ms sleep ends a few hundred µs
// late, 15% of the stage; a timerfd wakes ~90 µs late; and the shorter the
// yielding, the less it delays the network poller (-spin sets it). The
// tcp-procs case runs each rank as its own OS process (procs.go). Two
// ratios come out:
//
//   - ratio: measured iteration time / simulated makespan at the nominal costs.
//     It includes what the waits overshoot.
//   - ratio-eff: measured iteration time / simulated makespan at the measured
//     mean duration of each kind of stage call (nominal + overshoot + the
//     copy) and the transport's measured one-way latency as the comm cost
//     (half the median round trip of a 2x2 tensor between ranks 0 and 1,
//     before the run). It removes the instrument's error and the transfer
//     time the nominal model leaves out, and leaves what the runtime adds:
//     scheduling, host-side step overhead, queueing of transfers.
//
// The same measurement is BenchmarkRealisation and, with a loose bound,
// TestRealisationWithinBound in this package's tests.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/examples/internal/program"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/generated/interleaved"
	"github.com/ppgen/ppgen/generated/onef1b"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/world"
)

// The per-chunk costs, in the simulator's units (1 unit = 1 ms here).
const (
	costF = 2 * time.Millisecond
	costI = 2 * time.Millisecond // input-gradient half of B
	costW = 2 * time.Millisecond // weight-gradient half of B
	// costSpec is the same model for sim.ParseCost: B = I + W.
	costSpec = "F=2,B=4,W=2,comm=0"
)

// schedule is one catalog entry.
type schedule struct {
	name    string
	spec    pipe.Spec
	ranks   []func(*pipe.Exec) error
	program [][]pipe.Op // the same steps as data, to simulate
}

func catalog() []schedule {
	return []schedule{
		{"1f1b", onef1b.Spec, onef1b.Ranks[:], onef1b.Program},
		{"interleaved", interleaved.Spec, interleaved.Ranks[:], interleaved.Program},
	}
}

// transports are the cases: in-process channels, TCP with the ranks as
// goroutines of this process, TCP with one OS process per rank (procs.go).
var transports = []string{"inproc", "tcp", "tcp-procs"}

func main() {
	if isWorker() {
		if err := workerMain(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "realisation worker:", err)
			os.Exit(1)
		}
		return
	}
	var (
		sched = flag.String("schedule", "", "1f1b or interleaved (default: both)")
		tr    = flag.String("transport", "", "inproc, tcp (ranks as goroutines), tcp-procs (one OS process per rank) (default: all three), or mpi (the processes of mpirun -np 4, one -schedule per run; a build with -tags mpi)")
		mSync = flag.Bool("mpi-sync", false, "with -transport mpi: synchronous sends (MPI_Issend), the rendezvous semantics the schedules are verified under")
		iters = flag.Int("iters", 20, "measured iterations per case (after one warm-up iteration)")
		spin  = flag.Duration("spin", spinMargin, "how long before its deadline a stage's wait stops sleeping and yields in a loop (0: sleep only, as precise as the Go timer)")
	)
	flag.Parse()
	if *spin < 0 {
		fmt.Fprintf(os.Stderr, "realisation: -spin %v; want 0 or more\n", *spin)
		os.Exit(2)
	}
	spinMargin = *spin
	if *tr == "mpi" {
		if err := mpiMain(os.Stdout, *sched, *iters, *mSync); err != nil {
			fmt.Fprintln(os.Stderr, "realisation:", err)
			os.Exit(1)
		}
		return
	}
	if *mSync {
		fmt.Fprintln(os.Stderr, "realisation: -mpi-sync needs -transport mpi")
		os.Exit(2)
	}
	if err := run(os.Stdout, *sched, *tr, *iters); err != nil {
		fmt.Fprintln(os.Stderr, "realisation:", err)
		os.Exit(1)
	}
}

// The table's header and row.
const (
	header    = "schedule\ttransport\tsim ms\tmean ms\tmedian ms\tratio\tratio (median)\tovershoot µs mean/max\ttransfer µs\teff. sim ms\tratio-eff\t"
	rowFormat = "%s\t%s\t%.1f\t%.2f\t%.2f\t%.3f\t%.3f\t%.0f/%.0f\t%.0f\t%.2f\t%.3f\t\n"
)

func run(out io.Writer, sched, tr string, iters int) error {
	if iters < 1 {
		return fmt.Errorf("-iters %d; want at least 1", iters)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	found := false
	for _, sc := range catalog() {
		if sched != "" && sched != sc.name {
			continue
		}
		for _, t := range transports {
			if tr != "" && tr != t {
				continue
			}
			found = true
			res, err := measureCase(sc, t, iters)
			if err != nil {
				return fmt.Errorf("%s over %s: %w", sc.name, t, err)
			}
			mean, med := res.ms.mean(), res.ms.median()
			fmt.Fprintf(tw, rowFormat, sc.name, t, res.simMS, mean, med,
				mean/res.simMS, med/res.simMS, res.overMean, res.overMax, res.commMS*1e3, res.effSimMS, mean/res.effSimMS)
		}
	}
	if !found {
		return fmt.Errorf("no case matches -schedule %q -transport %q", sched, tr)
	}
	return tw.Flush()
}

// lowered reads the catalog program back from its Program table, checked
// against the generated Fingerprint.
func lowered(sc schedule) (ir.Program, error) {
	return program.Lowered(sc.spec, sc.program)
}

// makespan simulates p under the cost model spec and returns the makespan
// (in ms: the costs are given in ms).
func makespan(p ir.Program, spec string) (float64, error) {
	cost, err := sim.ParseCost(spec, p.Stages())
	if err != nil {
		return 0, err
	}
	res, err := sim.Run(p, cost)
	if err != nil {
		return 0, err
	}
	return res.Makespan, nil
}

// kind indexes the stage calls: F, I (BackwardInput), W (BackwardWeight).
type kind int

const (
	kindF kind = iota
	kindI
	kindW
	numKinds
)

// stats accumulates, over all stages of a world, how late the waits woke up
// and how long each kind of stage call took (entry to return).
type stats struct {
	overSum, overN, overMax atomic.Int64 // ns, count, ns
	durSum, durN            [numKinds]atomic.Int64
}

func (st *stats) reset() {
	st.overSum.Store(0)
	st.overN.Store(0)
	st.overMax.Store(0)
	for k := range numKinds {
		st.durSum[k].Store(0)
		st.durN[k].Store(0)
	}
}

// spinMargin is how long before its deadline a wait stops sleeping and
// yields in a loop instead: a sleep wakes late (time.Sleep a few hundred µs
// for 2 ms on this VM: epoll_pwait has millisecond granularity, plus the
// kernel's timer slack; preciseSleep's timerfd ~90 µs), which would make
// every stage call longer than its nominal cost. Yielding (runtime.Gosched)
// rather than busy-looping lets the comm goroutines and the other ranks run
// meanwhile, but a yielding goroutine keeps its process's scheduler from
// polling the network, so the margin is kept short: defaultSpin is 500 µs
// with a timerfd (Linux), 1 ms with time.Sleep. Zero means sleep only.
var spinMargin = defaultSpin

// wait takes a stage call of kind k that began at start: it sleeps until
// spinMargin before start+d, yields until start+d, and records the overshoot
// and the call's duration.
func (st *stats) wait(k kind, start time.Time, d time.Duration) {
	deadline := start.Add(d)
	if spinMargin == 0 {
		preciseSleep(time.Until(deadline))
	} else {
		if r := time.Until(deadline) - spinMargin; r > 0 {
			preciseSleep(r)
		}
		for time.Now().Before(deadline) {
			runtime.Gosched()
		}
	}
	now := time.Now()
	over := max(0, now.Sub(deadline))
	st.overSum.Add(int64(over))
	st.overN.Add(1)
	for m := st.overMax.Load(); int64(over) > m && !st.overMax.CompareAndSwap(m, int64(over)); m = st.overMax.Load() {
	}
	st.durSum[k].Add(int64(now.Sub(start)))
	st.durN[k].Add(1)
}

// overMeanMicros and overMaxMicros are the mean and largest overshoot in µs.
func (st *stats) overMeanMicros() float64 {
	if n := st.overN.Load(); n > 0 {
		return float64(st.overSum.Load()) / float64(n) / 1e3
	}
	return 0
}

func (st *stats) overMaxMicros() float64 { return float64(st.overMax.Load()) / 1e3 }

// meanMS is the mean duration of the calls of kind k in ms, or nominal when
// none ran.
func (st *stats) meanMS(k kind, nominal time.Duration) float64 {
	if n := st.durN[k].Load(); n > 0 {
		return float64(st.durSum[k].Load()) / float64(n) / 1e6
	}
	return float64(nominal) / 1e6
}

// effectiveCost is the cost model at the measured mean durations of the
// stage calls (nominal cost + wake-up overshoot + the copy), in ms.
// effectiveCost is the cost model at the measured mean durations of the
// stage calls and the measured one-way transfer latency commMS.
func (st *stats) effectiveCost(commMS float64) string {
	f, i, w := st.meanMS(kindF, costF), st.meanMS(kindI, costI), st.meanMS(kindW, costW)
	return fmt.Sprintf("F=%.4g,B=%.4g,W=%.4g,comm=%.4g", f, i+w, w, commMS)
}

// waitStage is a stage that copies its input and takes fixed durations.
type waitStage struct{ st *stats }

func (s waitStage) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	start := time.Now()
	y := x.Clone().(*tensor.Dense)
	s.st.wait(kindF, start, costF)
	return y, nil, nil
}

func (s waitStage) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) {
	start := time.Now()
	dx := dy.Clone().(*tensor.Dense)
	s.st.wait(kindI, start, costI)
	return dx, nil
}

func (s waitStage) BackwardWeight(_ any, _ *tensor.Dense) error {
	s.st.wait(kindW, time.Now(), costW)
	return nil
}

// mse is the mean squared error over all elements.
type mse struct{}

func (mse) Loss(y, target *tensor.Dense) (float64, *tensor.Dense, error) {
	yv, ok1 := y.Data().([]float64)
	tv, ok2 := target.Data().([]float64)
	if !ok1 || !ok2 || len(yv) != len(tv) {
		return 0, nil, errors.New("mse: want float64 tensors of one shape")
	}
	n := float64(len(yv))
	dy := make([]float64, len(yv))
	loss := 0.0
	for i := range yv {
		d := yv[i] - tv[i]
		loss += d * d / n
		dy[i] = 2 * d / n
	}
	return loss, tensor.New(tensor.WithShape(y.Shape().Clone()...), tensor.WithBacking(dy)), nil
}

// batches returns M deterministic 2x2 inputs and targets.
func batches(m int) pipe.MicroBatches {
	var b pipe.MicroBatches
	for i := range m {
		f := float64(i)
		b.Inputs = append(b.Inputs, tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float64{f, f + 1, f + 2, f + 3})))
		b.Targets = append(b.Targets, tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float64{0, 1, 0, 1})))
	}
	return b
}

// job is one schedule's ranks over one transport, all in this process.
type job struct {
	sc    schedule
	prog  ir.Program   // the lowered program, to simulate
	simMS float64      // its makespan at the nominal costs
	wd    *world.World // the transport; nil for a tcp-procs rank's job
	trs   []transport.Transport
	xs    []*pipe.Exec
	st    *stats
	// commMS is the transport's one-way latency for the stages' 2x2
	// tensors: half the median round trip between ranks 0 and 1, measured
	// before the executors start.
	commMS float64
}

func newJob(sc schedule, kind string) (*job, error) {
	prog, err := lowered(sc)
	if err != nil {
		return nil, err
	}
	simMS, err := makespan(prog, costSpec)
	if err != nil {
		return nil, err
	}
	w := &job{sc: sc, prog: prog, simMS: simMS, st: new(stats)}
	n := sc.spec.Ranks
	if kind != "inproc" && kind != "tcp" {
		return nil, fmt.Errorf("transport %q; want inproc or tcp", kind)
	}
	// Every rank in this process: over TCP on loopback.
	w.wd, err = world.Open(context.Background(), kind, world.Options{Size: n, Loopback: kind == "tcp",
		Fingerprint: sc.spec.Fingerprint, Schedule: sc.spec.Describe(), Timeout: 30 * time.Second, RendezvousTimeout: 20 * time.Second})
	if err != nil {
		return nil, err
	}
	w.trs = w.wd.Endpoints
	if w.commMS, err = pingPong(w.trs, 200); err != nil {
		w.close()
		return nil, fmt.Errorf("measuring the transfer latency: %w", err)
	}
	data := batches(sc.spec.Micro)
	for r := range n {
		stages := map[int]pipe.Stage{}
		for s, rr := range sc.spec.RankOf {
			if rr == r {
				stages[s] = waitStage{w.st}
			}
		}
		x, err := pipe.New(pipe.Config{Rank: r, Spec: sc.spec, Stages: stages, Loss: mse{}, Data: data, Transport: w.trs[r]})
		if err != nil {
			w.close()
			return nil, err
		}
		w.xs = append(w.xs, x)
	}
	return w, nil
}

// pingPong bounces a 2x2 tensor n times between ranks 0 and 1 (activation
// channel out, gradient channel back) and returns half the median round trip
// in ms: the one-way latency of a transfer as the stages make them.
func pingPong(trs []transport.Transport, n int) (float64, error) {
	t := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float64{1, 2, 3, 4}))
	echo := make(chan error, 1)
	go func() {
		for range n {
			tag, got, err := trs[1].Recv(0, abi.ActChannel)
			if err == nil {
				err = trs[1].Send(0, abi.GradChannel, tag, got)
			}
			if err != nil {
				echo <- err
				return
			}
		}
		echo <- nil
	}()
	rtt := make(msList, 0, n)
	for k := range n {
		start := time.Now()
		if err := trs[0].Send(1, abi.ActChannel, transport.Tag{Micro: int32(k)}, t); err != nil {
			return 0, err
		}
		if _, _, err := trs[0].Recv(1, abi.GradChannel); err != nil {
			return 0, err
		}
		rtt = append(rtt, float64(time.Since(start))/1e6)
	}
	if err := <-echo; err != nil {
		return 0, err
	}
	return rtt.median() / 2, nil
}

// iterate runs one training iteration on every rank and returns its wall time.
func (w *job) iterate() (time.Duration, error) {
	start := time.Now()
	err := pipe.RunAll(w.xs, w.sc.ranks)
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if l := w.xs[w.sc.spec.RankOf[w.sc.spec.Stages-1]].Losses(); len(l) != w.sc.spec.Micro || slices.ContainsFunc(l, math.IsNaN) {
		return 0, fmt.Errorf("losses %v: want one per micro-batch", l)
	}
	return d, nil
}

// result is what measure found.
type result struct {
	ms                msList  // iteration times, ms
	simMS             float64 // simulated makespan at the nominal costs, ms
	effSimMS          float64 // simulated makespan at the measured mean durations of the stage calls and transfers, ms
	commMS            float64 // measured one-way transfer latency, ms
	overMean, overMax float64 // overshoot of the waits, µs
	effCost           string  // the cost model of effSimMS
}

// warmUp runs one untimed iteration and clears the statistics.
func (w *job) warmUp() error {
	_, err := w.iterate()
	w.st.reset()
	return err
}

// finish completes r from the statistics gathered since warmUp.
func (w *job) finish(r result) (result, error) {
	r.simMS = w.simMS
	r.overMean, r.overMax = w.st.overMeanMicros(), w.st.overMaxMicros()
	r.commMS = w.commMS
	r.effCost = w.st.effectiveCost(w.commMS)
	var err error
	r.effSimMS, err = makespan(w.prog, r.effCost)
	return r, err
}

// measureCase measures sc over transport t: one warm-up iteration, then
// iters timed ones.
func measureCase(sc schedule, t string, iters int) (result, error) {
	if t == "tcp-procs" {
		return measureProcs(sc, iters)
	}
	w, err := newJob(sc, t)
	if err != nil {
		return result{}, err
	}
	defer w.close()
	return w.measure(iters)
}

// measure runs one warm-up iteration, then iters timed ones.
func (w *job) measure(iters int) (result, error) {
	if err := w.warmUp(); err != nil {
		return result{}, err
	}
	var r result
	for range iters {
		d, err := w.iterate()
		if err != nil {
			return result{}, err
		}
		r.ms = append(r.ms, float64(d)/1e6)
	}
	return w.finish(r)
}

func (w *job) close() {
	for _, x := range w.xs {
		x.Close()
	}
	if w.wd != nil {
		w.wd.Close()
	}
}

// msList is a list of iteration times in ms.
type msList []float64

func (l msList) mean() float64 {
	s := 0.0
	for _, v := range l {
		s += v
	}
	return s / float64(len(l))
}

func (l msList) median() float64 {
	s := slices.Sorted(slices.Values(l))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
