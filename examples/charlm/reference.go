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
	st, err := newSequential(o, sc.train.Spec.Micro)
	if err != nil {
		return nil, err
	}
	ref := &reference{m: st.m}
	validate := func(step int) error {
		l, err := st.validate(c)
		ref.hist.valid = append(ref.hist.valid, point{step, l})
		return err
	}
	if err := validate(0); err != nil {
		return nil, err
	}
	for step := range o.steps {
		l, err := st.step(c, o.seed, step)
		if err != nil {
			return nil, err
		}
		ref.hist.train = append(ref.hist.train, l)
		if o.evalAfter(step) {
			if err := validate(step + 1); err != nil {
				return nil, err
			}
		}
	}
	return ref, nil
}

// sequential trains the whole model as one Sequential.
type sequential struct {
	m     *model
	seq   *nn.Sequential
	micro int
	loss  nn.SoftmaxCrossEntropy
	data  *batches
	ps    []*nn.Param
	opt   nn.Optimizer
}

func newSequential(o options, micro int) (*sequential, error) {
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
	return &sequential{m: m, seq: nn.NewSequential(append(layers, m.norm, m.head)...), micro: micro,
		loss: nn.SoftmaxCrossEntropy{Scale: 1 / float64(micro)}, data: newBatches(dt, o.sh, micro),
		ps: m.params(), opt: nn.NewAdam(o.lr)}, nil
}

// step trains on training step step's micro-batches, one after the
// other, then takes the optimizer step; it returns the loss.
func (st *sequential) step(c *corpus, seed uint64, step int) (float64, error) {
	st.data.setTrainStep(c, seed, step)
	total := 0.0
	for k := range st.micro {
		y, saved, err := st.seq.Forward(st.data.inputs[k])
		if err != nil {
			return 0, err
		}
		l, dy, err := st.loss.Loss(y, st.data.target[k])
		if err != nil {
			return 0, err
		}
		if _, err := st.seq.Backward(saved, dy); err != nil {
			return 0, err
		}
		total += l
	}
	if err := st.opt.Step(st.ps); err != nil {
		return 0, err
	}
	nn.ZeroGrad(st.ps)
	return total, nil
}

// validate returns the validation loss, over the windows the pipeline's
// forward-only runs take.
func (st *sequential) validate(c *corpus) (float64, error) {
	total := 0.0
	for run := range evalRuns {
		st.data.setEvalRun(c, run)
		for k := range st.micro {
			y, _, err := st.seq.Forward(st.data.inputs[k])
			if err != nil {
				return 0, err
			}
			l, _, err := st.loss.Loss(y, st.data.target[k])
			if err != nil {
				return 0, err
			}
			total += l
		}
	}
	return total / evalRuns, nil
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
