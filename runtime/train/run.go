package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/checkpoint/nncheckpoint"
	"github.com/ppgen/ppgen/runtime/mesh"
	"github.com/ppgen/ppgen/runtime/metrics"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/world"
)

// Result is what a job recorded: one record per step it ran (a resumed
// job's from the step after the checkpoint's), the same on every rank,
// and the records of the evaluations before the first step (Step 0).
type Result struct {
	// Start is the step the job started from: 0, or a checkpoint's.
	Start int
	// Records holds the steps' records in order, an evaluation of the
	// initial model first (Step 0) when there was one.
	Records []metrics.Record
	// Layers are the trained layers this process's ranks hold, by model
	// layer index: each layer's parameters (one copy: replica 0's, or the
	// first model copy's, where this process holds several), named as in
	// a checkpoint. With FSDP their values are gathered from the shards
	// at the end (one all-gather per stage over the DP group).
	Layers map[int][]*nn.Param
	// Ranks holds what each of this process's ranks reports at the end,
	// by world rank.
	Ranks map[int]RankReport
}

// RankReport is what one rank of a job reports at its end.
type RankReport struct {
	// Pipe and Replica are the rank's coordinates: its pipeline rank and
	// its data-parallel replica (runtime/mesh).
	Pipe, Replica int
	// Memory is the rank's parameter memory: with FSDP its group's
	// (nn.FSDPGroup.Stats: the shards, and the peak of stages gathered)
	// plus a tower's whole parameters, gradients and optimizer state, else its whole parameters, gradients and optimizer state
	// (nn.WholeMem).
	Memory nn.MemStats
	// PeakLive is the most chunks whose saved context the rank held at
	// once during the job (pipe.Exec.PeakLive of its training program):
	// gen/verify's Report.PeakLive of the program, a chunk of a stage that
	// recomputes a share counting the share it keeps.
	PeakLive float64
	// NativeDP reports whether the rank's data-parallel group ran the
	// transport's own collectives (collective.Comm.Native: MPI's, NCCL's)
	// rather than runtime/collective's algorithms over Send and Recv;
	// false for DP = 1.
	NativeDP bool
}

// Run runs the job c describes on this process's ranks of its world (all
// of them for "inproc" and a Loopback "tcp" world, one otherwise) and
// returns the first local rank's records. A failing rank aborts the
// world, so every rank returns an error.
func Run(ctx context.Context, c Config) (*Result, error) {
	c, err := c.check()
	if err != nil {
		return nil, err
	}
	sp := c.Train.Spec
	m, err := mesh.New(sp.Ranks, c.DP)
	if err != nil {
		return nil, fmt.Errorf("train: DP %d: %w", c.DP, err)
	}
	o := c.WorldOptions
	o.Size = m.World()
	if o.SizeNote == "" {
		o.SizeNote = fmt.Sprintf("schedule %s has %d ranks, times %d replicas", sp.Describe(), sp.Ranks, c.DP)
	}
	o.Fingerprint = c.fingerprint()
	if o.Schedule == "" {
		o.Schedule = sp.Describe()
	}
	wd, err := world.Open(ctx, c.World, o)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	defer wd.Close()
	ranks := make([]*rank, len(wd.Endpoints))
	var local []int // the pipeline ranks of this process's ranks
	for i, ep := range wd.Endpoints {
		if ranks[i], err = newRank(c, m, wd, ep); err != nil {
			for _, r := range ranks[:i] {
				r.close()
			}
			wd.Abort(err)
			return nil, err
		}
		if !slices.Contains(local, ranks[i].pp) {
			local = append(local, ranks[i].pp)
		}
	}
	for _, r := range ranks {
		r.local = local
	}
	ranks[0].first = true
	results := make([]*Result, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Go(func() {
			defer r.close()
			results[i], errs[i] = r.loop()
			if errs[i] != nil {
				wd.Abort(errs[i])
			}
		})
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		return nil, err
	}
	res := results[0]
	res.Layers = map[int][]*nn.Param{}
	res.Ranks = map[int]RankReport{}
	for _, r := range ranks {
		res.Ranks[r.world] = RankReport{Pipe: r.pp, Replica: r.replica, Memory: r.memory(), PeakLive: r.train.PeakLive(), NativeDP: r.dpComm.Native()}
	}
	for _, r := range ranks {
		for _, l := range r.layers {
			if _, ok := res.Layers[l.layer]; !ok {
				res.Layers[l.layer] = l.params
			}
		}
	}
	return res, nil
}

// firstError returns the error of the rank that failed first, as far as
// this process can tell: one that is not another rank's abort, else the
// first one.
func firstError(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		var se *pipe.StepError
		if first == nil || (errors.As(first, &se) && !errors.As(err, &se)) {
			first = err
		}
	}
	return first
}

// loop runs the rank's steps.
func (r *rank) loop() (*Result, error) {
	c := r.cfg
	res := &Result{}
	var tokens int64
	if r.resumed != nil {
		res.Start, tokens = r.resumed.Step, r.resumed.Tokens
	}
	var mw *metrics.Writer
	if c.Metrics != nil && r.world == 0 {
		mw = metrics.NewWriter(c.Metrics)
	}
	record := func(rec metrics.Record) error {
		res.Records = append(res.Records, rec)
		if mw != nil {
			if err := mw.Write(rec); err != nil {
				return fmt.Errorf("train: metrics: %w", err)
			}
		}
		return nil
	}
	if res.Start == 0 && c.evalAfter(0) {
		l, err := r.evaluate(0)
		if err != nil {
			return nil, err
		}
		nan := math.NaN()
		if err := record(metrics.Record{EvalLoss: l, Loss: nan, LR: nan, GradNorm: nan, TokensPerSec: nan, StepSeconds: nan, Bubble: nan}); err != nil {
			return nil, err
		}
	}
	for step := res.Start; step < c.last(); step++ {
		rec, err := r.step(step)
		if err != nil {
			return nil, err
		}
		tokens += rec.Tokens // the step's
		rec.Tokens = tokens
		done := step + 1
		rec.EvalLoss = math.NaN()
		if c.evalAfter(done) {
			if rec.EvalLoss, err = r.evaluate(done); err != nil {
				return nil, err
			}
		}
		if err := record(rec); err != nil {
			return nil, err
		}
		if c.saveAfter(done) {
			if err := r.save(c.CheckpointDir, state{Step: done, Tokens: tokens}); err != nil {
				return nil, err
			}
		}
		if h := c.Hooks.AfterStep; h != nil {
			if err := h(r.world, rec); err != nil {
				return nil, fmt.Errorf("train: rank %d: AfterStep hook after step %d: %w", r.world, done, err)
			}
		}
	}
	if err := r.gather(); err != nil {
		return nil, err
	}
	return res, nil
}

// gather sets, with FSDP, the values of the rank's layers (Result.Layers)
// to the trained parameters gathered from its stages' shards.
func (r *rank) gather() error {
	byLayer := map[int]int{}
	for i, l := range r.layers {
		byLayer[l.layer] = i
	}
	for _, fs := range r.shards {
		vals, err := fs.f.Gather()
		if err != nil {
			return fmt.Errorf("train: rank %d: gathering %s: %w", r.world, fs.name, err)
		}
		for i, m := range fs.members {
			for _, p := range r.layers[byLayer[m.Layer]].params {
				if p.Name == m.Name {
					p.Value = vals[i]
				}
			}
		}
	}
	return nil
}

// step runs training step step (0-based): the program, the gradient
// reductions and clipping, the optimizer, and the loss gathered from
// every rank.
func (r *rank) step(step int) (metrics.Record, error) {
	c := r.cfg
	if r.reads {
		src, err := c.Data(step, r.replica)
		if err != nil {
			return metrics.Record{}, fmt.Errorf("train: rank %d: data of step %d: %w", r.world, step, err)
		}
		r.data.cur = src
	}
	if err := r.resetTimeline(); err != nil {
		return metrics.Record{}, fmt.Errorf("train: rank %d: step %d: %w", r.world, step+1, err)
	}
	t0 := time.Now()
	r.reduced = false
	if err := pipe.Run(r.train, c.Train.run(r.pp, c.Interpret)); err != nil {
		return metrics.Record{}, fmt.Errorf("train: step %d: %w", step+1, err)
	}
	tl := c.Timeline // nil: AddSpan records nothing
	tl.AddSpan(r.pp, pipe.SpanProgram, t0)
	lr := c.LR.LR(step)
	r.opt.SetLR(lr)
	if r.fsdp != nil {
		// The group's OptStep waits for its reduce-scatters, clips the
		// shards' gradients by the global norm (reduce), steps the shards
		// and zeroes their gradients.
		if err := r.fsdp.OptStep(r.opt, r.reduce)(); err != nil {
			return metrics.Record{}, fmt.Errorf("train: rank %d: step %d: %w", r.world, step+1, err)
		}
		if r.tower != nil {
			// The replicated tower, clipped with the shards (reduce).
			if err := r.opt.Step(r.tower.params); err != nil {
				return metrics.Record{}, fmt.Errorf("train: rank %d: step %d: the tower: %w", r.world, step+1, err)
			}
			nn.ZeroGrad(r.tower.params)
		}
	} else {
		if !r.reduced {
			t := time.Now()
			if err := r.reduce(); err != nil {
				return metrics.Record{}, fmt.Errorf("train: rank %d: step %d: %w", r.world, step+1, err)
			}
			tl.AddSpan(r.pp, pipe.SpanAllReduce, t)
		}
		t := time.Now()
		if err := r.opt.Step(r.params); err != nil {
			return metrics.Record{}, fmt.Errorf("train: rank %d: step %d: %w", r.world, step+1, err)
		}
		nn.ZeroGrad(r.params)
		tl.AddSpan(r.pp, pipe.SpanOptStep, t)
	}
	t := time.Now()
	loss, err := r.gatherLoss(r.train)
	if err != nil {
		return metrics.Record{}, fmt.Errorf("train: rank %d: step %d: %w", r.world, step+1, err)
	}
	tl.AddSpan(r.pp, pipe.SpanLoss, t)
	wall := time.Since(t0)
	stepTokens := c.TokensPerStep
	if c.CountTokens != nil {
		if stepTokens, err = r.stepTokens(); err != nil {
			return metrics.Record{}, fmt.Errorf("train: rank %d: step %d: %w", r.world, step+1, err)
		}
	}
	bubble := math.NaN()
	if c.Timeline != nil {
		bubble = metrics.Bubble(wall, metrics.Busy(c.Timeline.Events(), r.local))
	}
	return metrics.Record{
		Step: int64(step + 1), Loss: loss, LR: lr, GradNorm: r.norm,
		TokensPerSec: float64(stepTokens) / wall.Seconds(), StepSeconds: wall.Seconds(),
		Bubble: bubble, Tokens: stepTokens,
	}, nil
}

// resetTimeline empties Config.Timeline before a step, when there is one:
// every rank of the world has read the last step's events (a barrier),
// the process's first rank resets it, and no rank starts the step before
// (a second barrier).
func (r *rank) resetTimeline() error {
	if r.cfg.Timeline == nil {
		return nil
	}
	barrier := func() error { return nil }
	if r.wcomm != nil {
		barrier = nncheckpoint.CommBarrier(r.wcomm)
	}
	if err := barrier(); err != nil {
		return err
	}
	if r.first {
		r.cfg.Timeline.Reset()
	}
	return barrier()
}

// allReduce is the program's ALL_REDUCE hook (a -clip program's, before
// its OPT_STEP): the reduction of the global gradient norm.
func (r *rank) allReduce(n int) error {
	if n != 0 {
		return fmt.Errorf("train: the program holds %d reductions per step; the loop does one (the gradient norm)", n+1)
	}
	if r.fsdp != nil {
		return errors.New("train: a program with ALL_REDUCE (-clip) and FSDP reduces the norm before the shards' reduce-scatters end; generate it without -clip (the loop clips at the shards' optimizer step)")
	}
	if max(r.cfg.Train.Spec.Copies, 1) > 1 {
		return errors.New("train: a program with ALL_REDUCE (-clip) and two model copies reduces the norm before OPT_STEP sums the copies; generate it without -clip (the loop clips after the step's program)")
	}
	if r.tower != nil {
		// The tower's gradients are complete only after OPT_STEP's
		// backward and sum: the loop clips after the program, on every
		// rank alike, so that the norm counts them.
		return nil
	}
	r.reduced = true
	return r.reduce()
}

// reduce all-reduces the gradients over the data-parallel group (with
// FSDP the tower's only: the group's reduce-scatters did the shards'),
// then measures the global gradient norm and clips by it.
func (r *rank) reduce() error {
	if r.dpar != nil {
		if err := r.dpar.AllReduceGrads(); err != nil {
			return err
		}
	}
	maxNorm := r.cfg.Clip
	if maxNorm == 0 {
		maxNorm = math.MaxFloat64 // measure only
	}
	norm, err := nn.ClipGradNorm(r.wcomm, r.counted, r.params, maxNorm)
	if err != nil && !(r.cfg.Clip == 0 && errors.Is(err, nn.ErrNonFiniteNorm)) {
		return err
	}
	r.norm = norm
	return nil
}

// gatherLoss returns the mean loss of x's last run over the global batch
// on every rank: each rank adds the losses it computed (NaN where it did
// not), one all-reduce over the world sums them. After a program's
// GATHER_LOSS (`ppgen gen -gather-loss`) every rank of the pipeline holds
// all of its losses: with one pipeline in the world there is nothing to
// reduce, and with data-parallel replicas only each pipeline's rank 0 adds
// them, so no loss counts twice.
func (r *rank) gatherLoss(x *pipe.Exec) (float64, error) {
	sum := 0.0
	for _, l := range x.Losses() {
		if !math.IsNaN(l) {
			sum += l
		}
	}
	if x.LossesGathered() {
		if r.wcomm == nil || r.wcomm.Size() == x.Spec().Ranks {
			return sum, nil
		}
		if x.Rank() != 0 {
			sum = 0
		}
	}
	if r.wcomm == nil {
		return sum, nil
	}
	t := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{sum}))
	if err := r.wcomm.AllReduce(t); err != nil {
		return 0, fmt.Errorf("all-reduce of the loss: %w", err)
	}
	return t.Float64s()[0], nil
}

// evaluate runs the eval program EvalRuns times after step steps and
// returns the mean validation loss.
func (r *rank) evaluate(step int) (float64, error) {
	c := r.cfg
	total := 0.0
	for run := range c.EvalRuns {
		if r.reads {
			src, err := c.EvalData(run, r.replica)
			if err != nil {
				return 0, fmt.Errorf("train: rank %d: eval data of run %d: %w", r.world, run, err)
			}
			r.edata.cur = src
		}
		if err := pipe.Run(r.eval, c.Eval.run(r.pp, c.Interpret)); err != nil {
			return 0, fmt.Errorf("train: evaluation after step %d: %w", step, err)
		}
		l, err := r.gatherLoss(r.eval)
		if err != nil {
			return 0, fmt.Errorf("train: rank %d: evaluation after step %d: %w", r.world, step, err)
		}
		total += l
	}
	loss := total / float64(c.EvalRuns)
	if h := c.Hooks.AfterEval; h != nil {
		if err := h(r.world, step, loss); err != nil {
			return 0, fmt.Errorf("train: rank %d: AfterEval hook after step %d: %w", r.world, step, err)
		}
	}
	return loss, nil
}

// memory is the rank's parameter memory (RankReport.Memory).
func (r *rank) memory() nn.MemStats {
	if r.fsdp != nil {
		m := r.fsdp.Stats()
		if r.tower != nil { // replicated beside the shards
			t := nn.WholeMem(r.tower.params, r.opt)
			m.ParamBytes, m.GradBytes, m.OptimBytes = m.ParamBytes+t.ParamBytes, m.GradBytes+t.GradBytes, m.OptimBytes+t.OptimBytes
		}
		return m
	}
	return nn.WholeMem(r.params, r.opt)
}
