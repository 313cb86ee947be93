package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/world"
)

// rankState is one rank's share of the job: its training and validation
// executors over the same stage objects, and its optimizer step's time.
type rankState struct {
	rank            int
	train, eval     *pipe.Exec
	trainFn, evalFn func(*pipe.Exec) error
	optTime         time.Duration // the last OPT_STEP hook's
}

// newRankState builds rank r's executors over r's stages and the one
// transport of its world: the training program and the forward-only
// program, which run one after the other.
func newRankState(o options, sc schedule, r int, stages []*stage, data, edata *batches, tr transport.Transport, tl *pipe.Timeline) (*rankState, error) {
	sp := sc.train.Spec
	held := map[int]pipe.Stage{}
	var mine []*stage
	for _, s := range sp.StagesOf(r) {
		held[s] = stages[s]
		mine = append(mine, stages[s])
	}
	ps := pipeParams(mine)
	opt := nn.NewAdam(o.lr)
	rs := &rankState{rank: r, trainFn: sc.train.Ranks[r], evalFn: sc.eval.Ranks[r]}
	loss := nn.SoftmaxCrossEntropy{Scale: 1 / float64(sp.Micro)}
	var src, esrc pipe.DataSource
	if r == sp.RankOf[0] || r == sp.RankOf[sp.Stages-1] {
		src, esrc = data, edata // the other ranks get none: the runtime must not need it
	}
	var err error
	rs.train, err = pipe.New(pipe.Config{
		Rank: r, Spec: sp, Stages: held, Transport: tr, Loss: loss, Data: src, Timeline: tl,
		OptStep: func() error {
			t0 := time.Now()
			defer func() { rs.optTime = time.Since(t0) }()
			if err := opt.Step(ps); err != nil {
				return err
			}
			nn.ZeroGrad(ps)
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	rs.eval, err = pipe.New(pipe.Config{Rank: r, Spec: sc.eval.Spec, Stages: held, Transport: tr, Loss: loss, Data: esrc})
	if err != nil {
		rs.train.Close()
		return nil, err
	}
	return rs, nil
}

func (rs *rankState) close() {
	rs.train.Close()
	rs.eval.Close()
}

// job is the ranks this process runs: all of them in-process, one over
// TCP. last is the one holding the last stage (nil when it is elsewhere).
type job struct {
	sc    schedule
	ranks []*rankState
	last  *rankState
	tl    *pipe.Timeline
}

// run runs one iteration of the training or the validation program on
// every rank of w.
func (w *job) run(eval bool) error {
	xs := make([]*pipe.Exec, len(w.ranks))
	fns := make([]func(*pipe.Exec) error, len(w.ranks))
	for i, rs := range w.ranks {
		xs[i], fns[i] = rs.train, rs.trainFn
		if eval {
			xs[i], fns[i] = rs.eval, rs.evalFn
		}
	}
	if len(xs) == 1 {
		return pipe.Run(xs[0], fns[0])
	}
	return pipe.RunAll(xs, fns)
}

// loss is the last run's loss (the sum of the micro-batches', each scaled
// by 1/M: the mean over the run's tokens), when the last stage is here.
func (w *job) loss(eval bool) (float64, bool) {
	if w.last == nil {
		return 0, false
	}
	x := w.last.train
	if eval {
		x = w.last.eval
	}
	return sum(x.Losses()), true
}

func sum(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t
}

// point is a validation loss after step training steps.
type point struct {
	step int
	loss float64
}

// history is what a run recorded where the losses are: each training
// step's loss and the validation losses.
type history struct {
	train []float64
	valid []point
	wall  time.Duration // the last training step's, on this process
}

// evalSteps reports whether the validation loss is evaluated after step
// (0-based) training steps of o: every -eval-every and at the end.
func (o options) evalAfter(step int) bool { return (step+1)%o.evalEvery == 0 || step+1 == o.steps }

// train runs o.steps training steps on w, evaluating as o says, printing
// the losses when the last stage is here.
func train(o options, w *job, c *corpus, data, edata *batches, out io.Writer) (*history, error) {
	h := &history{}
	validate := func(step int) error {
		total, here := 0.0, false
		for run := range evalRuns {
			edata.setEvalRun(c, run)
			if err := w.run(true); err != nil {
				return fmt.Errorf("validation after step %d: %w", step, err)
			}
			var l float64
			l, here = w.loss(true)
			total += l
		}
		if here {
			h.valid = append(h.valid, point{step, total / evalRuns})
			fmt.Fprintf(out, "validation loss %.4f\n", total/evalRuns)
		}
		return nil
	}
	if err := validate(0); err != nil {
		return nil, err
	}
	for step := range o.steps {
		data.setTrainStep(c, o.seed, step)
		if w.tl != nil {
			w.tl.Reset() // keep the last step's
		}
		t0 := time.Now()
		if err := w.run(false); err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		h.wall = time.Since(t0)
		if l, ok := w.loss(false); ok {
			h.train = append(h.train, l)
			if (step+1)%o.logEvery == 0 || step+1 == o.steps {
				fmt.Fprintf(out, "step %d loss %.4f\n", step+1, l)
			}
		}
		if o.evalAfter(step) {
			if err := validate(step + 1); err != nil {
				return nil, err
			}
		}
	}
	return h, nil
}

// printBreakdown prints, per rank of w, where the last training step's
// wall time went: the stage calls the Timeline recorded (F, I, W), the
// optimizer hook (tied sum and Adam), and the rest: the runtime's steps,
// transfers and waiting for peers.
func printBreakdown(out io.Writer, w *job, step int, wall time.Duration) {
	by := make([][3]time.Duration, w.sc.train.Spec.Ranks) // rank, kind
	for _, e := range w.tl.Events() {
		k := map[byte]int{'F': 0, 'I': 1, 'W': 2}[e.Kind]
		if e.Rank >= 0 && e.Rank < len(by) {
			by[e.Rank][k] += e.End.Sub(e.Start)
		}
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(out, "breakdown of step %d (wall %s ms):\n", step, ms(wall))
	for _, rs := range w.ranks {
		b := by[rs.rank]
		calls := b[0] + b[1] + b[2]
		fmt.Fprintf(out, "  rank %d: stage calls %s ms (F %s, I %s, W %s), optimizer %s ms, rest %s ms (runtime, transfers, waiting)\n",
			rs.rank, ms(calls), ms(b[0]), ms(b[1]), ms(b[2]), ms(rs.optTime), ms(wall-calls-rs.optTime))
	}
}

// setup loads the corpus and builds the model and its stages.
func setup(o options) (schedule, tensor.Dtype, *corpus, *model, []*stage, error) {
	sc, err := lookup(o.schedule)
	if err != nil {
		return schedule{}, tensor.Dtype{}, nil, nil, nil, err
	}
	dt, err := o.dt()
	if err != nil {
		return schedule{}, tensor.Dtype{}, nil, nil, nil, err
	}
	c, err := loadCorpus(o.goroot)
	if err != nil {
		return schedule{}, tensor.Dtype{}, nil, nil, nil, err
	}
	if err := c.fits(o.sh, sc.train.Spec.Micro); err != nil {
		return schedule{}, tensor.Dtype{}, nil, nil, nil, err
	}
	m, err := newModel(o.sh, dt, o.seed, o.tie)
	if err != nil {
		return schedule{}, tensor.Dtype{}, nil, nil, nil, err
	}
	stages, err := m.cut(sc.train.Spec.Stages)
	return sc, dt, c, m, stages, err
}

// header prints what is trained on what.
func header(out io.Writer, o options, sc schedule, c *corpus, m *model, where string) {
	sp := sc.train.Spec
	n := 0
	for _, p := range m.params() {
		n += p.Value.Shape().TotalSize()
	}
	head := "tied head"
	if !o.tie {
		head = "untied head"
	}
	fmt.Fprintf(out, "charlm: %s, %d ranks, %d stages, %d micro-batches of %d×%d characters; %d blocks of width %d, %d parameters, %s, %s, %s\n",
		sp.Schedule, sp.Ranks, sp.Stages, sp.Micro, o.sh.Batch, o.sh.SeqLen, o.sh.Blocks, o.sh.Dim, n, head, o.dtype, where)
	fmt.Fprintf(out, "data: %d files of Go source under GOROOT/src: %d training and %d validation characters, unigram entropy %.4f nats (uniform over %d: %.4f)\n",
		c.files, len(c.train), len(c.valid), unigramEntropy(c.train), vocab, lnVocab())
}

// inproc is a finished in-process run: what -check compares.
type inproc struct {
	sc     schedule
	c      *corpus
	m      *model
	stages []*stage
	h      *history
}

// runInProc trains with every rank as a goroutine of this process.
func runInProc(o options, out io.Writer) error {
	r, err := trainInProc(o, out)
	if err != nil || !o.check {
		return err
	}
	return check(o, out, r.sc, r.c, r.m, r.stages, r.h, nil)
}

// trainInProc is runInProc up to -check.
func trainInProc(o options, out io.Writer) (*inproc, error) {
	r, w, data, edata, done, err := newInProc(o)
	if err != nil {
		return nil, err
	}
	defer done()
	sc, c, m := r.sc, r.c, r.m
	sp := sc.train.Spec
	header(out, o, sc, c, m, "in-process")
	h, err := train(o, w, c, data, edata, out)
	if err != nil {
		return nil, err
	}
	if o.breakdown && o.steps > 0 {
		printBreakdown(out, w, o.steps, h.wall)
	}
	if err := finish(o, out, h); err != nil {
		return nil, err
	}
	if o.trace != "" {
		if err := writeFile(o.trace, func(f io.Writer) error { return w.tl.WriteTrace(f, sp.Schedule, sc.train.Program) }); err != nil {
			return nil, fmt.Errorf("-trace: %w", err)
		}
		fmt.Fprintf(out, "wrote %s: the last training step's measured timeline\n", o.trace)
	}
	r.h = h
	return r, nil
}

// newInProc builds the in-process world of o: every rank, over two
// in-process transports (the training and the validation program's).
// done closes them.
func newInProc(o options) (r *inproc, w *job, data, edata *batches, done func(), err error) {
	sc, dt, c, m, stages, err := setup(o)
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	sp := sc.train.Spec
	data, edata = newBatches(dt, o.sh, sp.Micro), newBatches(dt, o.sh, sp.Micro)
	w = &job{sc: sc}
	if o.breakdown || o.trace != "" {
		w.tl = &pipe.Timeline{}
	}
	trs, err := world.Open(context.Background(), "inproc", world.Options{Size: sp.Ranks, Fingerprint: sc.fingerprint(), Timeout: o.timeout})
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	done = func() {
		for _, rs := range w.ranks {
			rs.close()
		}
		trs.Close()
	}
	for r := range sp.Ranks {
		rs, err := newRankState(o, sc, r, stages, data, edata, trs.Endpoints[r], w.tl)
		if err != nil {
			done()
			return nil, nil, nil, nil, nil, err
		}
		w.ranks = append(w.ranks, rs)
	}
	w.last = w.ranks[sc.lastRank()]
	return &inproc{sc: sc, c: c, m: m, stages: stages}, w, data, edata, done, nil
}

// finish writes the SVG, where the losses are.
func finish(o options, out io.Writer, h *history) error {
	if o.svg == "" || h == nil || (len(h.train) == 0 && len(h.valid) == 0) {
		return nil
	}
	if err := writeFile(o.svg, func(f io.Writer) error { return writeSVG(f, h) }); err != nil {
		return fmt.Errorf("-svg: %w", err)
	}
	fmt.Fprintf(out, "wrote %s: the loss curve\n", o.svg)
	return nil
}

// check trains the sequential reference and compares the losses recorded
// here (h) and the parameters of the stages in mine (all when nil) with it.
func check(o options, out io.Writer, sc schedule, c *corpus, m *model, stages []*stage, h *history, mine []int) error {
	ref, err := trainReference(o, sc, c)
	if err != nil {
		return err
	}
	lossDiff := -1.0
	if h != nil {
		lossDiff = 0
		if len(h.train) != len(ref.hist.train) || len(h.valid) != len(ref.hist.valid) {
			return fmt.Errorf("check: %d training and %d validation losses, the reference has %d and %d", len(h.train), len(h.valid), len(ref.hist.train), len(ref.hist.valid))
		}
		for i, l := range h.train {
			lossDiff = max(lossDiff, absDiff(l, ref.hist.train[i]))
		}
		for i, p := range h.valid {
			lossDiff = max(lossDiff, absDiff(p.loss, ref.hist.valid[i].loss))
		}
	}
	if mine == nil {
		for s := range stages {
			mine = append(mine, s)
		}
	}
	pairs := pairParams(m, stages, ref.m)
	paramDiff := 0.0
	for _, s := range mine {
		for _, p := range stages[s].Params() {
			q, ok := pairs[p]
			if !ok {
				return fmt.Errorf("check: stage %d's parameter %q has no counterpart in the reference", s, p.Name)
			}
			paramDiff = max(paramDiff, maxAbsDiff(p.Value, q.Value))
		}
	}
	return report(out, o.tolerance(), lossDiff, paramDiff)
}

// runRank runs the rank the environment names (RANK, WORLD_SIZE, ...)
// over -transport's world (TCP).
func runRank(o options, out io.Writer, logger *slog.Logger) error {
	sc, dt, c, m, stages, err := setup(o)
	if err != nil {
		return err
	}
	sp := sc.train.Spec
	wd, err := world.Open(context.Background(), o.transport, world.Options{
		Size: sp.Ranks, SizeNote: fmt.Sprintf("schedule %s has %d ranks", o.schedule, sp.Ranks),
		Fingerprint: sc.fingerprint(), // both programs'
		Schedule:    sp.Describe(),    // named when ranks refuse each other
		Timeout:     o.timeout, Logger: logger,
		Config: o.config, // a rank on another -seed fails every rank, naming it
	})
	if err != nil {
		return err
	}
	defer wd.Close()
	tr := wd.Endpoint()
	rank := tr.Rank()
	data, edata := newBatches(dt, o.sh, sp.Micro), newBatches(dt, o.sh, sp.Micro)
	w := &job{sc: sc}
	if o.breakdown {
		w.tl = &pipe.Timeline{}
	}
	rs, err := newRankState(o, sc, rank, stages, data, edata, tr, w.tl)
	if err != nil {
		return err
	}
	defer rs.close()
	w.ranks = []*rankState{rs}
	var h *history
	quiet := io.Discard
	if rank == sc.lastRank() {
		w.last, quiet = rs, out
		header(out, o, sc, c, m, "TCP, one process per rank")
	}
	h, err = train(o, w, c, data, edata, quiet)
	if err != nil {
		return err
	}
	if o.breakdown && o.steps > 0 {
		printBreakdown(out, w, o.steps, h.wall)
	}
	if w.last != nil {
		if err := finish(o, out, h); err != nil {
			return err
		}
	} else {
		h = nil
	}
	if !o.check {
		return nil
	}
	return check(o, out, sc, c, m, stages, h, sp.StagesOf(rank))
}

// launchSelf starts one process per rank of this same command (launch.Self).
func launchSelf(o options, logger *slog.Logger) error {
	sc, err := lookup(o.schedule)
	if err != nil {
		return err
	}
	return launch.Self(sc.train.Spec.Ranks, launch.LocalOptions{Logger: logger})
}
