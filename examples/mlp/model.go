package main

import (
	"fmt"
	"math"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/train"
)

// The model: an MLP of `blocks` blocks (Linear then Tanh), and a final
// Linear to the output width, cut into as many pipeline stages as the
// schedule has (the block count is divisible by every catalog stage count).
const (
	blocks    = 8
	inWidth   = 16
	hidden    = 32
	outWidth  = 4
	microRows = 8 // rows per micro-batch
)

// widen makes the first and the last block (an embedding and a head, in a
// language model's terms) costlier than the others: a deliberately uneven
// model for the measured-cost loop (BENCHMARKS.md "Measured costs").
type widen struct {
	// n > 0 makes the two blocks wide (-wide): Linear to n·hidden, Tanh,
	// Linear back to hidden, Tanh, some 2n times a plain block's work.
	n int
	// wait makes each of their forward and input-gradient calls (F, I) also
	// wait this long (-wide-wait), as a host waits for its accelerator:
	// unlike the arithmetic, waits of different ranks overlap on any number
	// of cores. (nn.Sequential skips a layer without parameters in W.)
	wait time.Duration
}

func (o options) widen() widen { return widen{o.wide, o.wideWait} }

// tieMode is how buildTiedStages builds the two uses of a tied layer.
type tieMode uint8

const (
	// tieCopies: each stage of a tie holds its own copy, equal at the
	// start (the pipeline's stages, kept equal by TIE_GRAD).
	tieCopies tieMode = iota
	// tieShared: both stages hold one parameter: one value tensor, and a
	// gradient buffer per use that trainSequential sums (stage A's plus
	// stage B's) before the optimizer steps the value once. The sequential
	// reference: one parameter whose gradient is the sum of both uses', in
	// the association the pipeline computes.
	tieShared
	// tieSameLayer: both stages hold the same *nn.Linear, whose gradient
	// accumulates both uses micro-batch by micro-batch (plain sequential
	// training; TestTiedReferenceIsSequential compares it with tieShared).
	tieSameLayer
)

// buildTiedStages is buildStages with ties (a tied schedule's Spec.Ties):
// each stage of a tie gets one more block, a tied Linear(hidden, hidden)
// then Tanh, after its own blocks (before the last stage's output layer).
// mode says how the two stages of a tie hold it (tieMode). The tied layers
// are drawn from their own generator, so the other layers are those of the
// untied model.
func buildTiedStages(numStages int, dt tensor.Dtype, seed uint64, ties []pipe.Tie, mode tieMode, w widen) ([]*nn.Sequential, error) {
	if blocks%numStages != 0 {
		return nil, fmt.Errorf("the model has %d blocks; %d stages do not divide it (use 1, 2, 4 or 8 stages)", blocks, numStages)
	}
	tied := make([]*nn.Linear, numStages)
	for n, t := range ties {
		if t.A < 0 || t.B >= numStages || t.A >= t.B {
			return nil, fmt.Errorf("tie %d:%d does not name two stages of %d", t.A, t.B, numStages)
		}
		for i, s := range []int{t.A, t.B} {
			if i == 1 && mode == tieSameLayer {
				tied[s] = tied[t.A]
				break
			}
			// Equal generator states give equal layers: the two copies.
			lin, err := nn.NewLinear(hidden, hidden, dt, nn.NewRand(seed*1_000_033+uint64(n)+7))
			if err != nil {
				return nil, err
			}
			if i == 1 && mode == tieShared {
				lin.Weight.Value, lin.Bias.Value = tied[t.A].Weight.Value, tied[t.A].Bias.Value
			}
			tied[s] = lin
		}
	}
	rng := nn.NewRand(seed)
	per := blocks / numStages
	stages := make([]*nn.Sequential, numStages)
	for s := range stages {
		var layers []nn.Layer
		for b := s * per; b < (s+1)*per; b++ {
			in := hidden
			if b == 0 {
				in = inWidth
			}
			if end := b == 0 || b == blocks-1; end && w.wait > 0 {
				layers = append(layers, wait{w.wait})
			}
			if w.n > 0 && (b == 0 || b == blocks-1) {
				up, err := nn.NewLinear(in, hidden*w.n, dt, rng)
				if err != nil {
					return nil, err
				}
				layers = append(layers, up, nn.Tanh{})
				in = hidden * w.n
			}
			lin, err := nn.NewLinear(in, hidden, dt, rng)
			if err != nil {
				return nil, err
			}
			layers = append(layers, lin, nn.Tanh{})
		}
		if tied[s] != nil {
			layers = append(layers, tied[s], nn.Tanh{})
		}
		if s == numStages-1 {
			lin, err := nn.NewLinear(hidden, outWidth, dt, rng)
			if err != nil {
				return nil, err
			}
			layers = append(layers, lin)
		}
		stages[s] = nn.NewSequential(layers...)
	}
	return stages, nil
}

// tiedLayer returns the tied Linear of stage s of sp's model (built by
// buildTiedStages with sp.Ties), or nil when s is in no tie.
func tiedLayer(sp pipe.Spec, s int, seq *nn.Sequential) *nn.Linear {
	tied := false
	for _, t := range sp.Ties {
		tied = tied || t.A == s || t.B == s
	}
	// The tied Linear and its Tanh end the stage, before the last stage's
	// output layer (counted from the end: -wide adds layers to the blocks).
	i := len(seq.Layers) - 2
	if s == stagesPerCopy(sp)-1 {
		i--
	}
	if !tied || i < 0 {
		return nil
	}
	lin, _ := seq.Layers[i].(*nn.Linear)
	return lin
}

// wait is a layer that passes its input (and gradient) through and waits d
// in each call: a device's time, for -wide-wait. It has no parameters, so
// nn.Sequential does not call its BackwardWeight.
type wait struct{ d time.Duration }

func (w wait) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	time.Sleep(w.d)
	return x, nil, nil
}

func (w wait) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) {
	time.Sleep(w.d)
	return dy, nil
}

func (w wait) BackwardWeight(any, *tensor.Dense) error {
	time.Sleep(w.d)
	return nil
}

func (wait) Params() []*nn.Param { return nil }

// batches is the synthetic data set: micro-batch m of training step `step`
// has inputs drawn from a seeded generator and targets from a fixed smooth
// function of them, so the model has something to learn.
type batches struct {
	dt     tensor.Dtype
	seed   uint64
	step   int
	inputs []*tensor.Dense
	target []*tensor.Dense
}

func newBatches(dt tensor.Dtype, seed uint64, micro int) *batches {
	return &batches{dt: dt, seed: seed, inputs: make([]*tensor.Dense, micro), target: make([]*tensor.Dense, micro)}
}

// setStep makes the micro-batches of one training step.
func (b *batches) setStep(step int) {
	b.step = step
	rng := nn.NewRand(b.seed*1_000_003 + uint64(step) + 1)
	for m := range b.inputs {
		x := make([]float64, microRows*inWidth)
		for i := range x {
			x[i] = rng.Float64()*2 - 1
		}
		y := make([]float64, microRows*outWidth)
		for r := range microRows {
			for o := range outWidth {
				var acc float64
				for i := range inWidth {
					acc += x[r*inWidth+i] * float64((i+o)%5-2) / 4
				}
				y[r*outWidth+o] = math.Sin(acc)
			}
		}
		b.inputs[m] = dense(b.dt, []int{microRows, inWidth}, x)
		b.target[m] = dense(b.dt, []int{microRows, outWidth}, y)
	}
}

func (b *batches) Input(m int) (*tensor.Dense, error)  { return b.inputs[m], nil }
func (b *batches) Target(m int) (*tensor.Dense, error) { return b.target[m], nil }

func dense(dt tensor.Dtype, shape []int, v []float64) *tensor.Dense {
	if dt == tensor.Float32 {
		w := make([]float32, len(v))
		for i, x := range v {
			w[i] = float32(x)
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(w))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// stagesPerCopy is the number of stages of one model copy: all of them,
// or half for dualpipe's two copies.
func stagesPerCopy(sp pipe.Spec) int { return sp.Stages / max(sp.Copies, 1) }

// trainConfig is the runtime/train job of o on sc over dp replicas, but
// for its world: the model with one model layer per stage of one model
// copy (stageLayer), the synthetic batches (replica d takes global
// micro-batches [d·M, (d+1)·M)), MSE, SGD at -lr, -steps, -interpret.
func (o options) trainConfig(sc schedule, dt tensor.Dtype, dp int) train.Config {
	sp := sc.Spec
	per := stagesPerCopy(sp)
	split := make([][2]int, sp.Stages)
	for s := range split {
		split[s] = [2]int{s % per, s%per + 1}
	}
	w := o.widen()
	return train.Config{
		Train:     train.Program{Spec: sp, Ranks: sc.Ranks, Ops: sc.Program},
		Interpret: o.interpret,
		DP:        dp,
		Layers:    split,
		Layer:     func(i int) (nn.Layer, error) { return stageLayer(sp, i, dt, o.seed, w) },
		Loss:      func(scale float64) pipe.Loss { return nn.MSE{Scale: scale} },
		Data: func(step, replica int) (pipe.DataSource, error) {
			b := newBatches(dt, o.seed, sp.Micro*dp)
			b.setStep(step)
			return share{global: b, off: replica * sp.Micro}, nil
		},
		Steps:     o.steps,
		Optimizer: func() nn.Optimizer { return &nn.SGD{LR: o.lr} },
		LR:        nn.ConstantLR{Value: o.lr},
	}
}

// stageLayer builds stage i of one copy of sp's model (buildTiedStages,
// with sp's ties), the whole model drawn from seed and that stage kept: the
// layer factory of trainConfig. A stage of a tie declares its tied Linear
// (nn.Tie).
func stageLayer(sp pipe.Spec, i int, dt tensor.Dtype, seed uint64, w widen) (nn.Layer, error) {
	stages, err := buildTiedStages(stagesPerCopy(sp), dt, seed, sp.Ties, tieCopies, w)
	if err != nil {
		return nil, err
	}
	if lin := tiedLayer(sp, i, stages[i]); lin != nil {
		return nn.Tie(stages[i], lin.Weight, lin.Bias)
	}
	return stages[i], nil
}
