package main

// The sequential references the tests train against (besides
// train.Reference, which -check runs): the model's stages trained one
// after the other, with ties held in the ways tieMode names.

import (
	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// buildStages builds the model deterministically from seed and cuts it into
// numStages stages of blocks/numStages blocks each, the first and last
// block widened by w.
func buildStages(numStages int, dt tensor.Dtype, seed uint64, w widen) ([]*nn.Sequential, error) {
	return buildTiedStages(numStages, dt, seed, nil, tieCopies, w)
}

// unique returns ps with each parameter value once: a tie's parameter is
// in two stages of the sequential model, and the optimizer steps it once.
func unique(ps []*nn.Param) []*nn.Param {
	seen := make(map[*tensor.Dense]bool, len(ps))
	out := ps[:0:0]
	for _, p := range ps {
		if !seen[p.Value] {
			seen[p.Value] = true
			out = append(out, p)
		}
	}
	return out
}

// sumTied adds, for every parameter value that ps (in stage order) holds
// twice with two gradient buffers (tieShared), the second use's gradient to
// the first's, element by element: stage A's plus stage B's, what the
// pipeline's TIE_GRAD computes. The optimizer then steps the first.
func sumTied(ps []*nn.Param) {
	first := make(map[*tensor.Dense]*nn.Param, len(ps))
	for _, p := range ps {
		q, ok := first[p.Value]
		if !ok {
			first[p.Value] = p
			continue
		}
		if q.Grad == p.Grad {
			continue // one layer in two places (tieSameLayer): one buffer
		}
		switch d := q.Grad.Data().(type) {
		case []float64:
			for k, v := range p.Grad.Data().([]float64) {
				d[k] += v
			}
		case []float32:
			for k, v := range p.Grad.Data().([]float32) {
				d[k] += v
			}
		}
	}
}

// params returns the parameters of the given stages in order.
func params(stages []*nn.Sequential) []*nn.Param {
	var ps []*nn.Param
	for _, s := range stages {
		ps = append(ps, s.Params()...)
	}
	return ps
}

// trainSequential trains the whole model without a pipeline on the same
// micro-batches: the reference that -check compares against. It returns
// the loss of every step.
func trainSequential(stages []*nn.Sequential, data *batches, opt nn.Optimizer, loss nn.MSE, steps int) ([][]float64, error) {
	all := params(stages)
	ps := unique(all)
	var losses [][]float64
	for step := range steps {
		data.setStep(step)
		perMicro := make([]float64, len(data.inputs))
		for m := range data.inputs {
			var err error
			if perMicro[m], err = microStep(stages, data, loss, m); err != nil {
				return nil, err
			}
		}
		sumTied(all)
		if err := opt.Step(ps); err != nil {
			return nil, err
		}
		nn.ZeroGrad(all)
		losses = append(losses, perMicro)
	}
	return losses, nil
}

// microStep runs micro-batch m forward through every stage and backward,
// adding its gradients to the parameters', and returns its loss.
func microStep(stages []*nn.Sequential, data *batches, loss nn.MSE, m int) (float64, error) {
	x := data.inputs[m]
	saved := make([]any, len(stages))
	for s, st := range stages {
		var err error
		if x, saved[s], err = st.Forward(x); err != nil {
			return 0, err
		}
	}
	l, dy, err := loss.Loss(x, data.target[m])
	if err != nil {
		return 0, err
	}
	for s := len(stages) - 1; s >= 0; s-- {
		if dy, err = stages[s].Backward(saved[s], dy); err != nil {
			return 0, err
		}
	}
	return l, nil
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
