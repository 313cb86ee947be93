package main

import (
	"fmt"
	"math"
	"time"

	"gonum.org/v1/gonum/mat"
	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/value"
	"github.com/ppgen/ppgen/runtime/value/gonumvalue"
)

// -backend gonum: the same model written on gonum's mat.Dense (Linear with
// mat.Dense Mul, Tanh), its stages pipe.ValueStages that pipe.FromValues
// adapts, its loss a pipe.ValueLoss, its data a pipe.ValueData, trained by
// the same generated programs through runtime/train (Config.WrapStage:
// onGonum). Each gonum stage mirrors one stage of the runtime/nn model (the
// same layers, its matrices views of the nn parameters' values and
// gradients), so the loop's optimizer (nn.SGD) steps the gonum weights and
// -check compares them with runtime/nn's sequential reference. The gonum
// stages are not Swappers, so a schedule's swap steps do nothing for them;
// -dp needs -backend nn.
//
// gonum's mat.Mul and runtime/nn's Linear sum in different orders (nn's
// forward starts its sums from the bias, gonum's adds the bias to the
// product; nn accumulates weight gradients inside its GEMM, gonum's Add
// after it), so the two differ by rounding: docs/internals.md, "Values",
// has the measured difference.

// gLayer is one layer on mat.Dense. The caller has checked shapes.
type gLayer interface {
	forward(x *mat.Dense) (y *mat.Dense, saved any, err error)
	backwardInput(saved any, dy *mat.Dense) (*mat.Dense, error)
	backwardWeight(saved any, dy *mat.Dense) error
	params() []*gParam
}

// gParam is a parameter and its gradient buffer: views of a runtime/nn
// parameter's.
type gParam struct{ w, g *mat.Dense }

// gLinear is y = x·W + b, W [in, out], b [1, out].
type gLinear struct{ weight, bias *gParam }

func (l *gLinear) params() []*gParam { return []*gParam{l.weight, l.bias} }

func (l *gLinear) forward(x *mat.Dense) (*mat.Dense, any, error) {
	rows, cols := x.Dims()
	in, out := l.weight.w.Dims()
	if cols != in {
		return nil, nil, fmt.Errorf("gonum Linear(%d, %d): input is %d×%d", in, out, rows, cols)
	}
	y := mat.NewDense(rows, out, nil)
	y.Mul(x, l.weight.w)
	b := l.bias.w.RawRowView(0)
	for r := range rows {
		row := y.RawRowView(r)
		for j := range row {
			row[j] += b[j]
		}
	}
	return y, x, nil
}

func (l *gLinear) checkDy(saved any, dy *mat.Dense) (*mat.Dense, error) {
	x, ok := saved.(*mat.Dense)
	if !ok || x == nil {
		return nil, fmt.Errorf("gonum Linear: context %T is not the input its forward saved", saved)
	}
	rows, _ := x.Dims()
	_, out := l.weight.w.Dims()
	if r, c := dy.Dims(); r != rows || c != out {
		return nil, fmt.Errorf("gonum Linear: output gradient is %d×%d, want %d×%d", r, c, rows, out)
	}
	return x, nil
}

func (l *gLinear) backwardInput(saved any, dy *mat.Dense) (*mat.Dense, error) {
	x, err := l.checkDy(saved, dy)
	if err != nil {
		return nil, err
	}
	rows, _ := x.Dims()
	in, _ := l.weight.w.Dims()
	dx := mat.NewDense(rows, in, nil)
	dx.Mul(dy, l.weight.w.T())
	return dx, nil
}

func (l *gLinear) backwardWeight(saved any, dy *mat.Dense) error {
	x, err := l.checkDy(saved, dy)
	if err != nil {
		return err
	}
	var g mat.Dense
	g.Mul(x.T(), dy)
	l.weight.g.Add(l.weight.g, &g)
	db := l.bias.g.RawRowView(0)
	rows, _ := dy.Dims()
	for r := range rows {
		for j, v := range dy.RawRowView(r) {
			db[j] += v
		}
	}
	return nil
}

// gTanh is tanh elementwise; it keeps its output.
type gTanh struct{}

func (gTanh) params() []*gParam { return nil }

func (gTanh) forward(x *mat.Dense) (*mat.Dense, any, error) {
	var y mat.Dense
	y.Apply(func(_, _ int, v float64) float64 { return math.Tanh(v) }, x)
	return &y, &y, nil
}

func (gTanh) backwardInput(saved any, dy *mat.Dense) (*mat.Dense, error) {
	y, ok := saved.(*mat.Dense)
	if !ok || y == nil {
		return nil, fmt.Errorf("gonum Tanh: context %T is not the output its forward saved", saved)
	}
	if r, c := dy.Dims(); r != y.RawMatrix().Rows || c != y.RawMatrix().Cols {
		return nil, fmt.Errorf("gonum Tanh: output gradient is %d×%d, want %d×%d", r, c, y.RawMatrix().Rows, y.RawMatrix().Cols)
	}
	var dx mat.Dense
	dx.Apply(func(i, j int, g float64) float64 { v := y.At(i, j); return g * (1 - v*v) }, dy)
	return &dx, nil
}

func (gTanh) backwardWeight(any, *mat.Dense) error { return nil }

// gWait is -wide-wait's wait layer on mat.Dense.
type gWait struct{ d time.Duration }

func (gWait) params() []*gParam { return nil }

func (w gWait) forward(x *mat.Dense) (*mat.Dense, any, error) {
	time.Sleep(w.d)
	return x, nil, nil
}

func (w gWait) backwardInput(_ any, dy *mat.Dense) (*mat.Dense, error) {
	time.Sleep(w.d)
	return dy, nil
}

func (w gWait) backwardWeight(any, *mat.Dense) error {
	time.Sleep(w.d)
	return nil
}

// gStage is one pipeline stage on mat.Dense: a pipe.ValueStage and a
// pipe.ValueCopyGrads (dualpipe's two model copies).
type gStage struct{ layers []gLayer }

// gSaved is a chunk's context: each layer's, and each layer's output
// gradient once BackwardInput ran.
type gSaved struct {
	ctx []any
	dys []*mat.Dense
}

// mirror returns the gonum stage of seq (its layers, nested Sequentials
// and tied stages flattened): its matrices are views of the nn
// parameters' values and gradients, so what the gonum layers compute is
// what the nn parameters hold, and nn's optimizer steps the gonum weights.
func mirror(seq *nn.Sequential) (*gStage, error) {
	g := &gStage{}
	var add func(l nn.Layer) error
	add = func(l nn.Layer) error {
		switch l := l.(type) {
		case *nn.Sequential:
			for _, inner := range l.Layers {
				if err := add(inner); err != nil {
					return err
				}
			}
		case *nn.TiedStage:
			return add(l.Layer)
		case *nn.Linear:
			if l.Dtype() != tensor.Float64 {
				return fmt.Errorf("-backend gonum: a layer is %v; gonum's mat.Dense is float64 (use -dtype float64)", l.Dtype())
			}
			g.layers = append(g.layers, &gLinear{weight: gParamOf(l.Weight, l.In, l.Out), bias: gParamOf(l.Bias, 1, l.Out)})
		case nn.Tanh:
			g.layers = append(g.layers, gTanh{})
		case wait:
			g.layers = append(g.layers, gWait(l))
		default:
			return fmt.Errorf("-backend gonum: layer %T has no gonum version", l)
		}
		return nil
	}
	if err := add(seq); err != nil {
		return nil, err
	}
	return g, nil
}

// gParamOf views p's value and gradient as rows×cols matrices.
func gParamOf(p *nn.Param, rows, cols int) *gParam {
	return &gParam{w: mat.NewDense(rows, cols, p.Value.Float64s()), g: mat.NewDense(rows, cols, p.Grad.Float64s())}
}

// gonumStage is a stage of the nn model run by its gonum mirror (adapted
// by pipe.FromValues): the mirror's matrices are the nn parameters'
// memory, so the loop's optimizer, gradient norm, tie and copy sums act on
// them (Params, Grads: pipe.CopyGrads).
type gonumStage struct {
	pipe.Stage
	seq *nn.Sequential
}

func (g gonumStage) Params() []*nn.Param    { return g.seq.Params() }
func (g gonumStage) Grads() []*tensor.Dense { return g.seq.Grads() }

// onGonum sets c up for -backend gonum (one pipeline): each stage run by
// its gonum mirror, the loss gMSE, the batches as mat.Dense.
func (o options) onGonum(c *train.Config) {
	data := c.Data
	c.Data = func(step, replica int) (pipe.DataSource, error) {
		src, err := data(step, replica)
		if err != nil {
			return nil, err
		}
		return pipe.FromValuesData(gBatches{src.(share).global}), nil
	}
	c.Loss = func(scale float64) pipe.Loss {
		return pipe.FromValuesLoss(gMSE{scale: scale}, gonumvalue.Maker{})
	}
	c.WrapStage = func(_, _ int, seq *nn.Sequential) (nn.ParamStage, error) {
		g, err := mirror(seq)
		if err != nil {
			return nil, err
		}
		st, err := pipe.FromValues(g, gonumvalue.Maker{})
		if err != nil {
			return nil, err
		}
		return gonumStage{Stage: st, seq: seq}, nil
	}
}

func (g *gStage) Forward(x value.Value) (value.Value, any, error) {
	m, err := gonumvalue.Dense(x)
	if err != nil {
		return nil, nil, err
	}
	s := &gSaved{ctx: make([]any, len(g.layers))}
	for i, l := range g.layers {
		if m, s.ctx[i], err = l.forward(m); err != nil {
			return nil, nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return gonumvalue.Of(m), s, nil
}

func (g *gStage) context(saved any) (*gSaved, error) {
	s, ok := saved.(*gSaved)
	if !ok || s == nil {
		return nil, fmt.Errorf("gonum stage: context %T is not one its Forward returned", saved)
	}
	return s, nil
}

// chain runs the layers' input gradients back from dy, keeping each
// layer's output gradient, and returns the stage's input gradient.
func (g *gStage) chain(s *gSaved, dy value.Value) (*mat.Dense, error) {
	m, err := gonumvalue.Dense(dy)
	if err != nil {
		return nil, err
	}
	s.dys = make([]*mat.Dense, len(g.layers))
	for i := len(g.layers) - 1; i >= 0; i-- {
		s.dys[i] = m
		if m, err = g.layers[i].backwardInput(s.ctx[i], m); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return m, nil
}

func (g *gStage) BackwardInput(saved any, dy value.Value) (value.Value, error) {
	s, err := g.context(saved)
	if err != nil {
		return nil, err
	}
	dx, err := g.chain(s, dy)
	if err != nil {
		return nil, err
	}
	return gonumvalue.Of(dx), nil
}

func (g *gStage) BackwardWeight(saved any, dy value.Value) error {
	s, err := g.context(saved)
	if err != nil {
		return err
	}
	if s.dys == nil {
		if _, err := g.chain(s, dy); err != nil {
			return err
		}
	}
	for i, l := range g.layers {
		if err := l.backwardWeight(s.ctx[i], s.dys[i]); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	s.ctx, s.dys = nil, nil
	return nil
}

func (g *gStage) params() []*gParam {
	var ps []*gParam
	for _, l := range g.layers {
		ps = append(ps, l.params()...)
	}
	return ps
}

// gMSE is nn.MSE's loss on mat.Dense: Scale/(rows·cols)·Σ(y-t)² and its
// gradient (pipe.ValueLoss).
type gMSE struct{ scale float64 }

func (l gMSE) Loss(y, target value.Value) (float64, value.Value, error) {
	ym, err := gonumvalue.Dense(y)
	if err != nil {
		return 0, nil, err
	}
	tm, err := gonumvalue.Dense(target)
	if err != nil {
		return 0, nil, err
	}
	r, c := ym.Dims()
	if tr, tc := tm.Dims(); tr != r || tc != c {
		return 0, nil, fmt.Errorf("gonum MSE: target is %d×%d, output %d×%d", tr, tc, r, c)
	}
	k := l.scale / float64(r*c)
	dy := mat.NewDense(r, c, nil)
	var sum float64
	for i := range r {
		yr, tr, dr := ym.RawRowView(i), tm.RawRowView(i), dy.RawRowView(i)
		for j := range yr {
			d := yr[j] - tr[j]
			sum += d * d
			dr[j] = 2 * k * d
		}
	}
	return k * sum, gonumvalue.Of(dy), nil
}

// gBatches is the synthetic data set as gonum matrices (pipe.ValueData):
// views of the batches' float64 tensors.
type gBatches struct{ b *batches }

func (g gBatches) Input(m int) (value.Value, error)  { return g.matrix(g.b.inputs, m) }
func (g gBatches) Target(m int) (value.Value, error) { return g.matrix(g.b.target, m) }

func (g gBatches) matrix(ts []*tensor.Dense, m int) (value.Value, error) {
	if m < 0 || m >= len(ts) {
		return nil, fmt.Errorf("no micro-batch %d (have %d)", m, len(ts))
	}
	sh := ts[m].Shape()
	return gonumvalue.Of(mat.NewDense(sh[0], sh[1], ts[m].Float64s())), nil
}
