package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/examples/internal/compare"
	"github.com/ppgen/ppgen/runtime/metrics"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/train"
)

// reference is the sequential reference run: the model, unsplit, and the
// records of its steps and evaluations (Step, Loss, EvalLoss).
type reference struct {
	m    *model
	recs []metrics.Record
}

// trainReference trains the model of o without a pipeline, on the same
// micro-batches (micro per replica, -dp replicas) in micro-batch order, with the same optimizer, schedule
// and clipping, evaluating at the same steps: the run -check compares
// with. A tied head reads the embedding's own token table, one parameter
// with one AdamW state, whose gradient both layers add to.
func trainReference(o options, shs *shards, micro int) (*reference, error) {
	micro *= o.dp // the global batch, as one replica
	sh, err := shs.sample(micro, 1)
	if err != nil {
		return nil, err
	}
	dt, err := o.dt()
	if err != nil {
		return nil, err
	}
	m, err := newModel(o.sh, dt, o.seed, o.tie)
	if err != nil {
		return nil, err
	}
	seq, ps := nn.NewSequential(m.seqLayers()...), m.params()
	loss := nn.SoftmaxCrossEntropy{Scale: 1 / float64(micro)}
	opt, lr := o.optimizer(), o.lrSchedule()
	ref := &reference{m: m}
	// pass runs the micro-batches of src through the model, backward too
	// when train, and returns the sum of their losses.
	pass := func(read func(int, int) (pipe.DataSource, error), k int, train bool) (float64, error) {
		src, err := read(k, 0)
		if err != nil {
			return 0, err
		}
		total := 0.0
		for mb := range micro {
			x, err := src.Input(mb)
			if err != nil {
				return 0, err
			}
			t, err := src.Target(mb)
			if err != nil {
				return 0, err
			}
			y, saved, err := seq.Forward(x)
			if err != nil {
				return 0, err
			}
			l, dy, err := loss.Loss(y, t)
			if err != nil {
				return 0, err
			}
			if train {
				if _, err := seq.Backward(saved, dy); err != nil {
					return 0, err
				}
			} else if err := seq.Release(saved); err != nil {
				return 0, err
			}
			total += l
		}
		return total, nil
	}
	validate := func(step int) error {
		total := 0.0
		for run := range evalRuns {
			l, err := pass(sh.evalRun, run, false)
			if err != nil {
				return err
			}
			total += l
		}
		ref.recs = append(ref.recs, metrics.Record{Step: int64(step), Loss: math.NaN(), EvalLoss: total / evalRuns})
		return nil
	}
	if o.evalEvery > 0 {
		if err := validate(0); err != nil {
			return nil, err
		}
	}
	for step := range o.steps {
		l, err := pass(sh.trainStep, step, true)
		if err != nil {
			return nil, err
		}
		if o.clip > 0 {
			if _, err := nn.ClipGradNorm(nil, ps, ps, o.clip); err != nil {
				return nil, err
			}
		}
		opt.SetLR(lr.LR(step))
		if err := opt.Step(ps); err != nil {
			return nil, err
		}
		nn.ZeroGrad(ps)
		ref.recs = append(ref.recs, metrics.Record{Step: int64(step + 1), Loss: l, EvalLoss: math.NaN()})
		if done := step + 1; done%o.evalEvery == 0 || done == o.steps {
			if err := validate(done); err != nil {
				return nil, err
			}
			ref.recs = append(ref.recs[:len(ref.recs)-2], metrics.Record{Step: int64(done), Loss: l, EvalLoss: ref.recs[len(ref.recs)-1].EvalLoss})
		}
	}
	return ref, nil
}

// check trains the sequential reference and compares the records of the
// pipelined run (res) and the layers this process holds with it.
func check(o options, out io.Writer, sh *shards, micro int, res *train.Result) error {
	ref, err := trainReference(o, sh, micro)
	if err != nil {
		return err
	}
	if len(res.Records) != len(ref.recs) {
		return fmt.Errorf("check: %d records, the reference has %d", len(res.Records), len(ref.recs))
	}
	lossDiff := 0.0
	for i, r := range res.Records {
		w := ref.recs[i]
		if r.Step != w.Step {
			return fmt.Errorf("check: record %d is of step %d, the reference's of step %d", i, r.Step, w.Step)
		}
		lossDiff = max(lossDiff, absDiff(r.Loss, w.Loss), absDiff(r.EvalLoss, w.EvalLoss))
	}
	refLayers := ref.m.seqLayers()
	paramDiff := 0.0
	for layer, ps := range res.Layers {
		want := refLayers[layer].Params()
		if len(want) != len(ps) {
			return fmt.Errorf("check: layer %d has %d parameters, the reference's %d", layer, len(ps), len(want))
		}
		for j, p := range ps {
			paramDiff = max(paramDiff, maxAbsDiff(p.Value, want[j].Value))
		}
	}
	return report(out, o.tolerance(), lossDiff, paramDiff)
}

// absDiff is |a - b|, 0 for two NaNs (a loss neither run has), +Inf for
// one.
func absDiff(a, b float64) float64 {
	if a == b || (math.IsNaN(a) && math.IsNaN(b)) {
		return 0
	}
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.Inf(1)
	}
	return math.Abs(a - b)
}

// maxAbsDiff is the largest |a[i] - b[i]| of two tensors of one shape
// (+Inf when the shapes differ).
func maxAbsDiff(a, b *tensor.Dense) float64 {
	x, y := compare.Floats(a), compare.Floats(b)
	if len(x) != len(y) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range x {
		d = max(d, absDiff(x[i], y[i]))
	}
	return d
}

// writeFile writes what write produces to path: into a temporary file
// beside it, renamed over path once complete, so a failed write leaves no
// partial file.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("%s: cannot write in its directory %s: %w", path, filepath.Dir(path), errors.Unwrap(err))
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.Rename(f.Name(), path)
}
