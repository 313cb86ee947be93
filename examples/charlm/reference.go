package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/nn"
)

// reference is the sequential reference run: the model, unsplit, and its
// losses.
type reference struct {
	m    *model
	hist history
}

// trainReference trains the model of o without a pipeline, on the same
// micro-batches in micro-batch order, evaluating the validation loss at the
// same steps: the run -check compares with. A tied head reads the
// embedding's own token table, one parameter with one Adam state, whose
// gradient both layers add to.
func trainReference(o options, sc schedule, c *corpus) (*reference, error) {
	dt, err := o.dt()
	if err != nil {
		return nil, err
	}
	m, err := newModel(o.sh, dt, o.seed, o.tie)
	if err != nil {
		return nil, err
	}
	layers := []nn.Layer{m.emb}
	for _, b := range m.blocks {
		layers = append(layers, b)
	}
	seq := nn.NewSequential(append(layers, m.norm, m.head)...)
	micro := sc.train.Spec.Micro
	loss := nn.SoftmaxCrossEntropy{Scale: 1 / float64(micro)}
	data := newBatches(dt, o.sh, micro)
	ps := m.params()
	opt := nn.NewAdam(o.lr)
	ref := &reference{m: m}
	validate := func(step int) error {
		total := 0.0
		for run := range evalRuns {
			data.setEvalRun(c, run)
			for k := range micro {
				y, _, err := seq.Forward(data.inputs[k])
				if err != nil {
					return err
				}
				l, _, err := loss.Loss(y, data.target[k])
				if err != nil {
					return err
				}
				total += l
			}
		}
		ref.hist.valid = append(ref.hist.valid, point{step, total / evalRuns})
		return nil
	}
	if err := validate(0); err != nil {
		return nil, err
	}
	for step := range o.steps {
		data.setTrainStep(c, o.seed, step)
		total := 0.0
		for k := range micro {
			y, saved, err := seq.Forward(data.inputs[k])
			if err != nil {
				return nil, err
			}
			l, dy, err := loss.Loss(y, data.target[k])
			if err != nil {
				return nil, err
			}
			if _, err := seq.Backward(saved, dy); err != nil {
				return nil, err
			}
			total += l
		}
		if err := opt.Step(ps); err != nil {
			return nil, err
		}
		nn.ZeroGrad(ps)
		ref.hist.train = append(ref.hist.train, total)
		if o.evalAfter(step) {
			if err := validate(step + 1); err != nil {
				return nil, err
			}
		}
	}
	return ref, nil
}

// pairParams maps each parameter of the pipeline's model (m, cut into
// stages) to the reference's: in order, and the head's copy of a tied
// table to the reference's one table.
func pairParams(m *model, stages []*stage, ref *model) map[*nn.Param]*nn.Param {
	pairs := map[*nn.Param]*nn.Param{}
	pp, rp := m.params(), ref.params()
	for i := range min(len(pp), len(rp)) {
		pairs[pp[i]] = rp[i]
	}
	if m.tied {
		for _, p := range stages[len(stages)-1].tied {
			pairs[p] = ref.emb.Token
		}
	}
	return pairs
}

func absDiff(a, b float64) float64 {
	if a == b {
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
	x, y := floats(a), floats(b)
	if len(x) != len(y) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range x {
		d = max(d, absDiff(x[i], y[i]))
	}
	return d
}

func floats(t *tensor.Dense) []float64 {
	if v, ok := t.Data().([]float32); ok {
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	return t.Data().([]float64)
}

func lnVocab() float64 { return math.Log(vocab) }

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
