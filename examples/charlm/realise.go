package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"text/tabwriter"
	"time"

	progtable "github.com/ppgen/ppgen/examples/internal/program"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/tune"
	"github.com/ppgen/ppgen/runtime/metrics"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/train"
)

// realiseWarmup is how many first steps -realise leaves out of its
// figures (the first touches every buffer and warms the allocator).
const realiseWarmup = 1

// stepSample is what -realise keeps of one training step: its record,
// its measured timeline as a trace and the timeline's records.
type stepSample struct {
	rec       metrics.Record
	trace     []byte
	events    []pipe.TimelineEvent
	transfers []pipe.TimelineTransfer
	spans     []pipe.TimelineSpan
	gc        gcShare // the Go runtime's work from the last step's end to this one's
}

// gcShare is the garbage collector's share of a step: the bytes the
// process allocated, the collections and their stop-the-world pauses.
type gcShare struct {
	allocMB float64
	cycles  uint64
	pauseMS float64
}

// gcNow reads the process's allocation and collection totals.
func gcNow() (allocBytes, cycles uint64, pause time.Duration) {
	s := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	rtmetrics.Read(s)
	var st debug.GCStats
	debug.ReadGCStats(&st)
	return s[0].Value.Uint64(), s[1].Value.Uint64(), st.PauseTotal
}

// rankShare is one rank's time in one step, ms, by where it went.
type rankShare struct {
	compute   float64 // in its stage calls (F, I, W)
	transfers float64 // in the transfers outside batches (a receive's wait for its peer included)
	program   float64 // the program's run, pipe.Run (compute and transfers included)
	allReduce float64 // the gradient norm's reduction and clipping (waiting for the other ranks included)
	opt       float64 // AdamW's step and zeroing the gradients
	loss      float64 // gathering the loss (waiting included)
}

// realisation is -realise's measurement of one step, in ms.
type realisation struct {
	wall float64 // the step's wall time (its record's)
	// base is the simulated makespan of the program alone at the medians
	// of the step's calls (gen/tune's fit without opt and allreduce: what
	// the simulator saw before it was given the trainer's host work);
	// median adds the trainer's reduction, optimizer step and loss
	// gathering (the trained program, progtable.AsTrained, with the fitted
	// opt and allreduce); mean is that at the means of the calls (tune's
	// Mean), and each at every call's own duration (tune's Each, a replay
	// of the calls as they ran).
	base, median, mean, each float64
	// shared is the makespan at the medians of the calls alone (each
	// call's duration divided by the sharing of the cores it ran with,
	// tune's Cores) with the ranks sharing the machine's cores
	// (sim.RunShared): the model of 4 ranks on fewer cores.
	shared  float64
	fit     tune.Fit // the medians'
	gc      gcShare
	ranks   []rankShare
	busy    []contention // by the ranks computing during a call, 1 to P
	simBusy []float64    // the simulator's compute per rank in the replay
}

// realise trains o's job in-process with a Timeline for o.steps steps and
// reports how closely each step realises the simulated makespan of the
// same program at the costs gen/tune fits to that step's own trace: the
// ratio measured step / simulated makespan, and where each rank's time
// went against what the simulator charges.
func realise(o options, out io.Writer) error {
	sp, rs, err := measureRealisation(o)
	if err != nil {
		return err
	}
	return writeRealisation(out, sp, rs)
}

// measureRealisation runs o's job and fits and simulates each step after
// the warm-up.
func measureRealisation(o options) (pipe.Spec, []realisation, error) {
	if o.transport != "inproc" || o.dp != 1 {
		return pipe.Spec{}, nil, fmt.Errorf("-realise measures the in-process job of one replica; drop -transport %s and -dp %d", o.transport, o.dp)
	}
	sc, err := lookup(o.schedule)
	if err != nil {
		return pipe.Spec{}, nil, err
	}
	sp := sc.train.Spec
	prog, err := progtable.Lowered(sp, sc.train.Program)
	if err != nil {
		return sp, nil, err
	}
	trained := progtable.AsTrained(prog)
	samples, err := measureSteps(o, sc)
	if err != nil {
		return sp, nil, err
	}
	if len(samples) <= realiseWarmup {
		return sp, nil, fmt.Errorf("-realise needs more than %d steps (-steps %d)", realiseWarmup, o.steps)
	}
	var rs []realisation
	for _, s := range samples[realiseWarmup:] {
		r, err := realiseStep(s, sp, prog, trained, runtime.GOMAXPROCS(0))
		if err != nil {
			return sp, nil, fmt.Errorf("step %d: %w", s.rec.Step, err)
		}
		rs = append(rs, r)
	}
	return sp, rs, nil
}

// measureSteps runs the job with a Timeline and keeps every step's.
func measureSteps(o options, sc schedule) ([]stepSample, error) {
	sp := sc.train.Spec
	dt, err := o.dt()
	if err != nil {
		return nil, err
	}
	sh, err := openShards(o, dt)
	if err != nil {
		return nil, err
	}
	defer sh.close()
	o.evalEvery = 1 << 30 // no evaluation inside the window
	cfg, err := jobConfig(o, sc, sh, io.Discard, nil)
	if err != nil {
		return nil, err
	}
	cfg.Eval, cfg.EvalEvery = nil, 0
	tl := &pipe.Timeline{}
	cfg.Timeline = tl
	var samples []stepSample
	var captureErr error
	alloc0, cycles0, pause0 := gcNow()
	arrived := make(chan struct{}, sp.Ranks)
	cfg.Hooks.AfterEval = nil
	cfg.Hooks.AfterStep = func(rank int, rec metrics.Record) error {
		if rank != 0 {
			arrived <- struct{}{} // its spans are recorded
			return nil
		}
		for range sp.Ranks - 1 {
			<-arrived
		}
		// The other ranks wait at the next step's barrier before the
		// timeline is reset: it holds this step's records until we return.
		var b bytes.Buffer
		if err := tl.WriteTrace(&b, sp.Schedule, sc.train.Program); err != nil {
			captureErr = err
		}
		alloc, cycles, pause := gcNow()
		gc := gcShare{allocMB: float64(alloc-alloc0) / 1e6, cycles: cycles - cycles0, pauseMS: float64(pause-pause0) / 1e6}
		alloc0, cycles0, pause0 = alloc, cycles, pause
		samples = append(samples, stepSample{rec: rec, trace: b.Bytes(), events: tl.Events(), transfers: tl.Transfers(), spans: tl.Spans(), gc: gc})
		return captureErr
	}
	if _, err := train.Run(context.Background(), cfg); err != nil {
		return nil, err
	}
	return samples, nil
}

// realiseStep fits and simulates one step and splits its ranks' time.
func realiseStep(s stepSample, sp pipe.Spec, prog, trained ir.Program, cores int) (realisation, error) {
	r := realisation{wall: s.rec.StepSeconds * 1e3, gc: s.gc}
	fitted := func(mean, each bool) (tune.Fit, error) {
		return tune.Read(bytes.NewReader(s.trace), tune.Options{Stages: sp.Stages, Copies: max(sp.Copies, 1), Mean: mean, Each: each})
	}
	sfit, err := tune.Read(bytes.NewReader(s.trace), tune.Options{Stages: sp.Stages, Copies: max(sp.Copies, 1), Cores: cores})
	if err != nil {
		return r, err
	}
	res, err := sim.RunShared(trained, sfit.Cost(), cores)
	if err != nil {
		return r, err
	}
	r.shared = res.Makespan
	if r.fit, err = fitted(false, false); err != nil {
		return r, err
	}
	mfit, err := fitted(true, false)
	if err != nil {
		return r, err
	}
	efit, err := fitted(false, true)
	if err != nil {
		return r, err
	}
	c := r.fit.Cost()
	c.Opt, c.AllReduce = 0, 0
	for _, run := range []struct {
		p    ir.Program
		c    sim.Cost
		into *float64
	}{{prog, c, &r.base}, {trained, r.fit.Cost(), &r.median}, {trained, mfit.Cost(), &r.mean}, {trained, efit.Cost(), &r.each}} {
		res, err := sim.Run(run.p, run.c)
		if err != nil {
			return r, err
		}
		*run.into, r.simBusy = res.Makespan, res.Busy
	}
	r.ranks = make([]rankShare, sp.Ranks)
	r.busy = contentionOf(s.events, sp.Ranks)
	ms := func(a, b time.Time) float64 { return float64(b.Sub(a)) / 1e6 }
	for _, e := range s.events {
		r.ranks[e.Rank].compute += ms(e.Start, e.End)
	}
	for _, e := range s.transfers {
		r.ranks[e.Rank].transfers += ms(e.Start, e.End)
	}
	for _, e := range s.spans {
		sh := &r.ranks[e.Rank]
		switch e.Name {
		case pipe.SpanProgram:
			sh.program += ms(e.Start, e.End)
		case pipe.SpanAllReduce:
			sh.allReduce += ms(e.Start, e.End)
		case pipe.SpanOptStep:
			sh.opt += ms(e.Start, e.End)
		case pipe.SpanLoss:
			sh.loss += ms(e.Start, e.End)
		}
	}
	return r, nil
}

// writeRealisation prints each step's ratios and where its gap goes, and
// the per-rank breakdown of the median step.
//
// The gap of a step, wall − base, splits into the host work the trainer
// adds around the program (median − base: the reduction, AdamW, the loss),
// compute variance (each − median: the calls as they ran against a
// typical call of their stage and kind) and what the model still misses
// (wall − each: waits the simulator does not see and the runtime's own
// time; the calls' slowing each other when more ranks compute than the
// machine has cores is in their durations, so in the variance).
func writeRealisation(out io.Writer, sp pipe.Spec, rs []realisation) error {
	fmt.Fprintf(out, "charlm -realise: %s, %d ranks in-process, %d steps after %d warm-up; costs fitted by gen/tune to each step's own trace, ms\n",
		sp.Schedule, sp.Ranks, len(rs), realiseWarmup)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tmeasured\tsim: program\tratio\t+ host work\tratio\tshared cores\tratio\tat means\tratio\teach call\tratio-eff\tgap: host\tvariance\tnot modelled\topt\tallreduce\tcomm\talloc MB\tGCs\tGC pauses\t")
	for i, r := range rs {
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.3f\t%.1f\t%.3f\t%.1f\t%.3f\t%.1f\t%.3f\t%.1f\t%.3f\t%.1f\t%.1f\t%.1f\t%.3f\t%.3f\t%.4f\t%.0f\t%d\t%.2f\t\n", i+realiseWarmup+1, r.wall,
			r.base, r.wall/r.base, r.median, r.wall/r.median, r.shared, r.wall/r.shared, r.mean, r.wall/r.mean, r.each, r.wall/r.each,
			r.median-r.base, r.each-r.median, r.wall-r.each, r.fit.Opt, r.fit.AllReduce, r.fit.Comm, r.gc.allocMB, r.gc.cycles, r.gc.pauseMS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	med := func(f func(realisation) float64) float64 { return medianOf(rs, f) }
	fmt.Fprintf(out, "median: measured %.1f ms; ratio %.3f to the program alone at the medians, %.3f with the host work, %.3f on %d shared cores, %.3f at the means, ratio-eff %.3f at each call's duration\n",
		med(func(r realisation) float64 { return r.wall }), med(func(r realisation) float64 { return r.wall / r.base }),
		med(func(r realisation) float64 { return r.wall / r.median }), med(func(r realisation) float64 { return r.wall / r.shared }), runtime.GOMAXPROCS(0),
		med(func(r realisation) float64 { return r.wall / r.mean }),
		med(func(r realisation) float64 { return r.wall / r.each }))
	fmt.Fprintf(out, "median gap: host work %.1f ms, compute variance %.1f ms, not modelled %.1f ms\n",
		med(func(r realisation) float64 { return r.median - r.base }), med(func(r realisation) float64 { return r.each - r.median }),
		med(func(r realisation) float64 { return r.wall - r.each }))
	fmt.Fprintln(out, "per rank, the median over the steps, ms; sim: the simulator's replay of each call (idle: the makespan less compute and host work)")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tprogram\tcompute\tsim compute\tidle in program\tsim idle\ttransfers\tALL_REDUCE\tOPT_STEP\tloss\t")
	for k := range sp.Ranks {
		sh := func(f func(rankShare) float64) float64 {
			return med(func(r realisation) float64 { return f(r.ranks[k]) })
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t\n", k,
			sh(func(s rankShare) float64 { return s.program }), sh(func(s rankShare) float64 { return s.compute }),
			med(func(r realisation) float64 { return r.simBusy[k] }),
			sh(func(s rankShare) float64 { return s.program - s.compute }),
			med(func(r realisation) float64 { return r.each - r.simBusy[k] - r.fit.Opt - 2*(r.fit.Comm+r.fit.AllReduce) }),
			sh(func(s rankShare) float64 { return s.transfers }), sh(func(s rankShare) float64 { return s.allReduce }),
			sh(func(s rankShare) float64 { return s.opt }), sh(func(s rankShare) float64 { return s.loss }))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "the calls by how many ranks computed during them (their own included; all steps): how many, and their mean duration over the median of their stage and kind")
	for k := range sp.Ranks {
		n, slow := 0, 0.0
		for _, r := range rs {
			n, slow = n+r.busy[k].calls, slow+r.busy[k].slow
		}
		if n > 0 {
			fmt.Fprintf(out, "  %d ranks: %d calls at %.2f×", k+1, n, slow/float64(n))
		}
	}
	fmt.Fprintln(out)
	return nil
}

// contention is what the calls that ran beside k-1 other ranks' calls,
// on average over their time, took against a typical call: their count
// and the sum of each one's duration over the median of its stage and
// kind in the step.
type contention struct {
	calls int
	slow  float64 // Σ duration / median
}

// contentionOf sorts a step's calls by how many ranks computed during
// them (the call's own rank and the others' calls overlapping it,
// weighted by the overlap, rounded) and sums how slow each was against
// the median call of its stage and kind: on 2 cores, a call beside 3
// others should take about twice a call alone.
func contentionOf(events []pipe.TimelineEvent, ranks int) []contention {
	type sk struct {
		stage int
		kind  byte
	}
	durs := map[sk][]float64{}
	for _, e := range events {
		durs[sk{e.Stage, e.Kind}] = append(durs[sk{e.Stage, e.Kind}], float64(e.End.Sub(e.Start)))
	}
	med := map[sk]float64{}
	for k, d := range durs {
		slices.Sort(d)
		med[k] = d[len(d)/2]
	}
	out := make([]contention, ranks)
	for _, e := range events {
		d := float64(e.End.Sub(e.Start))
		m := med[sk{e.Stage, e.Kind}]
		if d <= 0 || m <= 0 {
			continue
		}
		beside := 0.0 // other ranks' calls during e, in e's durations
		for _, o := range events {
			if o.Rank == e.Rank {
				continue
			}
			end, start := e.End, e.Start
			if o.End.Before(end) {
				end = o.End
			}
			if o.Start.After(start) {
				start = o.Start
			}
			if end.After(start) {
				beside += float64(end.Sub(start)) / d
			}
		}
		k := min(int(beside+0.5), ranks-1)
		out[k].calls++
		out[k].slow += d / m
	}
	return out
}

// medianOf is the median of f over the steps.
func medianOf(rs []realisation, f func(realisation) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}
