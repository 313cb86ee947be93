package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gorgonia.org/tensor"
)

// Linear is a fully connected layer y = x·W + b with W [In, Out] and
// b [Out].
type Linear struct {
	In, Out int
	Weight  *Param // Value and Grad of shape [In, Out]
	Bias    *Param // Value and Grad of shape [Out]
	dtype   tensor.Dtype
}

// linearSaved is the context of one Linear.Forward.
type linearSaved struct {
	l          *Linear
	x          *tensor.Dense // contiguous input, nil once BackwardWeight has run
	rows       int
	weightDone bool
}

// NewLinear returns a Linear layer of dtype dt (tensor.Float32 or
// tensor.Float64). Its weights are drawn Xavier-uniform from
// U(-a, a), a = sqrt(6/(in+out)), in float64 from rng and then rounded to dt.
// Its bias is zero. Equal rng states give equal layers.
func NewLinear(in, out int, dt tensor.Dtype, rng *rand.Rand) (*Linear, error) {
	if in <= 0 || out <= 0 {
		return nil, fmt.Errorf("nn: NewLinear: sizes in=%d, out=%d must be positive", in, out)
	}
	if !checkDtype(dt) {
		return nil, fmt.Errorf("nn: NewLinear: dtype %v, want float32 or float64", dt)
	}
	if rng == nil {
		return nil, fmt.Errorf("nn: NewLinear: nil *rand.Rand (use NewRand(seed))")
	}
	a := math.Sqrt(6 / float64(in+out))
	w := newMatrix(dt, in, out)
	switch dt {
	case tensor.Float32:
		for i, d := 0, data[float32](w); i < len(d); i++ {
			d[i] = float32(a * (2*rng.Float64() - 1))
		}
	default:
		for i, d := 0, data[float64](w); i < len(d); i++ {
			d[i] = a * (2*rng.Float64() - 1)
		}
	}
	return &Linear{
		In: in, Out: out, dtype: dt,
		Weight: &Param{Name: "weight", Value: w, Grad: newMatrix(dt, in, out)},
		Bias:   &Param{Name: "bias", Value: newVector(dt, out), Grad: newVector(dt, out)},
	}, nil
}

// Dtype returns the layer's element type.
func (l *Linear) Dtype() tensor.Dtype { return l.dtype }

// Params returns the weight and the bias.
func (l *Linear) Params() []*Param { return []*Param{l.Weight, l.Bias} }

// ZeroGrad clears the layer's gradients.
func (l *Linear) ZeroGrad() { ZeroGrad(l.Params()) }

// check verifies that the parameters still have the layer's shapes and
// dtype.
func (l *Linear) check(where string) error {
	if l == nil {
		return fmt.Errorf("nn: %s: nil *Linear", where)
	}
	if l.dtype.Type == nil || !checkDtype(l.dtype) {
		return fmt.Errorf("nn: %s: Linear is not initialized; build it with NewLinear", where)
	}
	return checkShapes(where, l.dtype, paramShape{l.Weight, tensor.Shape{l.In, l.Out}}, paramShape{l.Bias, tensor.Shape{l.Out}})
}

// Forward returns y = x·W + b for x of shape [batch, In]. It keeps x for
// BackwardWeight.
func (l *Linear) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	const where = "Linear.Forward"
	if err := l.check(where); err != nil {
		return nil, nil, err
	}
	x, rows, cols, err := matrix(where, "input", x)
	if err != nil {
		return nil, nil, err
	}
	if cols != l.In || x.Dtype() != l.dtype {
		return nil, nil, fmt.Errorf("nn: %s: input is %v %v, want %v (batch, %d) for weight (%d, %d)",
			where, x.Dtype(), x.Shape(), l.dtype, l.In, l.In, l.Out)
	}
	y := newMatrix(l.dtype, rows, l.Out)
	switch l.dtype {
	case tensor.Float32:
		linearForward(data[float32](x), data[float32](l.Weight.Value), data[float32](l.Bias.Value), data[float32](y), rows, l.In, l.Out)
	default:
		linearForward(data[float64](x), data[float64](l.Weight.Value), data[float64](l.Bias.Value), data[float64](y), rows, l.In, l.Out)
	}
	return y, &linearSaved{l: l, x: x, rows: rows}, nil
}

// backwardArgs checks a saved context and the output gradient dy.
func (l *Linear) backwardArgs(where string, saved any, dy *tensor.Dense) (*linearSaved, *tensor.Dense, error) {
	if err := l.check(where); err != nil {
		return nil, nil, err
	}
	s, ok := saved.(*linearSaved)
	if !ok || s == nil {
		return nil, nil, fmt.Errorf("nn: %s: saved context is %T, want the one returned by this Linear's Forward", where, saved)
	}
	if s.l != l {
		return nil, nil, fmt.Errorf("nn: %s: saved context belongs to another Linear (%d→%d)", where, s.l.In, s.l.Out)
	}
	dy, rows, cols, err := matrix(where, "output gradient", dy)
	if err != nil {
		return nil, nil, err
	}
	if rows != s.rows || cols != l.Out || dy.Dtype() != l.dtype {
		return nil, nil, fmt.Errorf("nn: %s: output gradient is %v %v, want %v (%d, %d) like the forward output",
			where, dy.Dtype(), dy.Shape(), l.dtype, s.rows, l.Out)
	}
	return s, dy, nil
}

// BackwardInput returns dx = dy·Wᵀ.
func (l *Linear) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	s, dy, err := l.backwardArgs("Linear.BackwardInput", saved, dy)
	if err != nil {
		return nil, err
	}
	dx := newMatrix(l.dtype, s.rows, l.In)
	switch l.dtype {
	case tensor.Float32:
		linearBackwardInput(data[float32](dy), data[float32](l.Weight.Value), data[float32](dx), s.rows, l.In, l.Out)
	default:
		linearBackwardInput(data[float64](dy), data[float64](l.Weight.Value), data[float64](dx), s.rows, l.In, l.Out)
	}
	return dx, nil
}

// BackwardWeight adds xᵀ·dy to the weight gradient and the column sums of
// dy to the bias gradient. It can run once per saved context and does not
// need a prior BackwardInput.
func (l *Linear) BackwardWeight(saved any, dy *tensor.Dense) error {
	const where = "Linear.BackwardWeight"
	s, dy, err := l.backwardArgs(where, saved, dy)
	if err != nil {
		return err
	}
	if s.weightDone {
		return fmt.Errorf("nn: %s: already called on this saved context", where)
	}
	switch l.dtype {
	case tensor.Float32:
		linearBackwardWeight(data[float32](s.x), data[float32](dy), data[float32](l.Weight.Grad), data[float32](l.Bias.Grad), s.rows, l.In, l.Out)
	default:
		linearBackwardWeight(data[float64](s.x), data[float64](dy), data[float64](l.Weight.Grad), data[float64](l.Bias.Grad), s.rows, l.In, l.Out)
	}
	s.weightDone, s.x = true, nil
	return nil
}

// Backward runs BackwardInput and then BackwardWeight.
func (l *Linear) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return fullBackward(l.BackwardInput, l.BackwardWeight, saved, dy)
}
