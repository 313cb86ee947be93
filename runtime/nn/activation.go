package nn

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"
)

// ReLU is the elementwise max(x, 0). Its gradient at 0 is taken as 0.
type ReLU struct{}

// Tanh is the elementwise hyperbolic tangent.
type Tanh struct{}

// GELU is the exact Gaussian error linear unit x·Φ(x), where Φ is the
// standard normal CDF (PyTorch's GELU with approximate="none").
type GELU struct{}

// actSaved is the context of an activation's Forward: the tensor the
// derivative is computed from (y for ReLU and Tanh, x for GELU).
type actSaved struct {
	kind string
	t    *tensor.Dense
}

type activation struct {
	name string
	// fwd computes y from x; keepX says whether the context keeps x
	// (otherwise y).
	keepX bool
	f32   func(x, y []float32)
	f64   func(x, y []float64)
	// b32/b64 compute dx from the kept tensor k and dy.
	b32 func(k, dy, dx []float32)
	b64 func(k, dy, dx []float64)
}

var (
	reluAct = activation{name: "ReLU",
		f32: func(x, y []float32) { mapf(x, y, reluf[float32]) }, f64: func(x, y []float64) { mapf(x, y, reluf[float64]) },
		b32: func(k, dy, dx []float32) { zipf(k, dy, dx, relub[float32]) }, b64: func(k, dy, dx []float64) { zipf(k, dy, dx, relub[float64]) },
	}
	tanhAct = activation{name: "Tanh",
		f32: func(x, y []float32) { mapf(x, y, tanhf[float32]) }, f64: func(x, y []float64) { mapf(x, y, tanhf[float64]) },
		b32: func(k, dy, dx []float32) { zipf(k, dy, dx, tanhb[float32]) }, b64: func(k, dy, dx []float64) { zipf(k, dy, dx, tanhb[float64]) },
	}
	geluAct = activation{name: "GELU", keepX: true,
		f32: func(x, y []float32) { mapf(x, y, geluf[float32]) }, f64: func(x, y []float64) { mapf(x, y, geluf[float64]) },
		b32: func(k, dy, dx []float32) { zipf(k, dy, dx, gelub[float32]) }, b64: func(k, dy, dx []float64) { zipf(k, dy, dx, gelub[float64]) },
	}
)

func mapf[T float](x, y []T, f func(T) T) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = f(v)
	}
}

func zipf[T float](k, dy, dx []T, f func(k, dy T) T) {
	dy, dx = dy[:len(k)], dx[:len(k)]
	for i, v := range k {
		dx[i] = f(v, dy[i])
	}
}

func reluf[T float](x T) T {
	if x > 0 {
		return x
	}
	return 0
}

// relub takes y = relu(x): y > 0 exactly when x > 0.
func relub[T float](y, dy T) T {
	if y > 0 {
		return dy
	}
	return 0
}

func tanhf[T float](x T) T { return T(math.Tanh(float64(x))) }

// tanhb takes y = tanh(x).
func tanhb[T float](y, dy T) T { return dy * (1 - y*y) }

func geluf[T float](x T) T {
	v := float64(x)
	return T(v * 0.5 * math.Erfc(-v/math.Sqrt2))
}

// gelub takes x: d/dx x·Φ(x) = Φ(x) + x·φ(x).
func gelub[T float](x, dy T) T {
	v := float64(x)
	d := 0.5*math.Erfc(-v/math.Sqrt2) + v*math.Exp(-0.5*v*v)/math.Sqrt(2*math.Pi)
	return T(float64(dy) * d)
}

func (a *activation) forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	where := a.name + ".Forward"
	x, rows, cols, err := matrix(where, "input", x)
	if err != nil {
		return nil, nil, err
	}
	y := newMatrix(x.Dtype(), rows, cols)
	switch x.Dtype() {
	case tensor.Float32:
		a.f32(data[float32](x), data[float32](y))
	default:
		a.f64(data[float64](x), data[float64](y))
	}
	k := y
	if a.keepX {
		k = x
	}
	return y, &actSaved{kind: a.name, t: k}, nil
}

func (a *activation) saved(where string, saved any) (*actSaved, error) {
	s, ok := saved.(*actSaved)
	if !ok || s == nil {
		return nil, fmt.Errorf("nn: %s: saved context is %T, want the one returned by %s.Forward", where, saved, a.name)
	}
	if s.kind != a.name {
		return nil, fmt.Errorf("nn: %s: saved context comes from %s.Forward", where, s.kind)
	}
	if s.t == nil {
		return nil, fmt.Errorf("nn: %s: saved context was already released by BackwardWeight", where)
	}
	return s, nil
}

func (a *activation) backwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	where := a.name + ".BackwardInput"
	s, err := a.saved(where, saved)
	if err != nil {
		return nil, err
	}
	dy, rows, cols, err := matrix(where, "output gradient", dy)
	if err != nil {
		return nil, err
	}
	if !sameShape(dy.Shape(), s.t.Shape()) || dy.Dtype() != s.t.Dtype() {
		return nil, fmt.Errorf("nn: %s: output gradient is %v %v, want %v %v like the forward output",
			where, dy.Dtype(), dy.Shape(), s.t.Dtype(), s.t.Shape())
	}
	dx := newMatrix(dy.Dtype(), rows, cols)
	switch dy.Dtype() {
	case tensor.Float32:
		a.b32(data[float32](s.t), data[float32](dy), data[float32](dx))
	default:
		a.b64(data[float64](s.t), data[float64](dy), data[float64](dx))
	}
	return dx, nil
}

// backwardWeight checks the context and releases it: activations have no
// parameters.
func (a *activation) backwardWeight(saved any, dy *tensor.Dense) error {
	s, err := a.saved(a.name+".BackwardWeight", saved)
	if err != nil {
		return err
	}
	s.t = nil
	return nil
}

func (a *activation) backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return fullBackward(a.backwardInput, a.backwardWeight, saved, dy)
}

// fullBackward is Backward of a layer whose backward is split in two: the
// input gradient (input), then the weight gradient (weight), which does not
// run when the first fails.
func fullBackward(input func(any, *tensor.Dense) (*tensor.Dense, error), weight func(any, *tensor.Dense) error, saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	dx, err := input(saved, dy)
	if err != nil {
		return nil, err
	}
	return dx, weight(saved, dy)
}

// Forward returns max(x, 0) elementwise.
func (ReLU) Forward(x *tensor.Dense) (*tensor.Dense, any, error) { return reluAct.forward(x) }

// BackwardInput returns dy where the input was positive and 0 elsewhere.
func (ReLU) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return reluAct.backwardInput(saved, dy)
}

// BackwardWeight only releases the saved context: ReLU has no parameters.
func (ReLU) BackwardWeight(saved any, dy *tensor.Dense) error {
	return reluAct.backwardWeight(saved, dy)
}

// Backward runs BackwardInput and then BackwardWeight.
func (ReLU) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return reluAct.backward(saved, dy)
}

// Params returns nil.
func (ReLU) Params() []*Param { return nil }

// Forward returns tanh(x) elementwise.
func (Tanh) Forward(x *tensor.Dense) (*tensor.Dense, any, error) { return tanhAct.forward(x) }

// BackwardInput returns dy·(1 - tanh²(x)).
func (Tanh) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return tanhAct.backwardInput(saved, dy)
}

// BackwardWeight only releases the saved context: Tanh has no parameters.
func (Tanh) BackwardWeight(saved any, dy *tensor.Dense) error {
	return tanhAct.backwardWeight(saved, dy)
}

// Backward runs BackwardInput and then BackwardWeight.
func (Tanh) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return tanhAct.backward(saved, dy)
}

// Params returns nil.
func (Tanh) Params() []*Param { return nil }

// Forward returns x·Φ(x) elementwise. It keeps x for the backward pass.
func (GELU) Forward(x *tensor.Dense) (*tensor.Dense, any, error) { return geluAct.forward(x) }

// BackwardInput returns dy·(Φ(x) + x·φ(x)).
func (GELU) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return geluAct.backwardInput(saved, dy)
}

// BackwardWeight only releases the saved context: GELU has no parameters.
func (GELU) BackwardWeight(saved any, dy *tensor.Dense) error {
	return geluAct.backwardWeight(saved, dy)
}

// Backward runs BackwardInput and then BackwardWeight.
func (GELU) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return geluAct.backward(saved, dy)
}

// Params returns nil.
func (GELU) Params() []*Param { return nil }
