package nn

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"
)

// Optimizer updates parameters from their accumulated gradients. SGD, Adam
// and AdamW implement it.
type Optimizer interface {
	// Step applies one update to every parameter. It does not clear the
	// gradients.
	Step(params []*Param) error
	// SetLR sets the learning rate of the next steps (an LR schedule's
	// value, Schedule.LR).
	SetLR(lr float64)
	// State returns a copy of the optimizer's state for params, keyed by
	// their names (see OptimState), for a checkpoint.
	State(params []*Param) (OptimState, error)
	// SetState replaces the optimizer's state for params with a copy of
	// st (a checkpoint's): every parameter must have its entry, and every
	// entry its parameter.
	SetState(params []*Param, st OptimState) error
}

// SGD is stochastic gradient descent with optional momentum, in PyTorch's
// convention:
//
//	v ← Momentum·v + g   (v = g on a parameter's first step)
//	p ← p - LR·v
//
// With Momentum 0 it is p ← p - LR·g. The velocity is kept per *Param; its
// State is the buffer "momentum_buffer" (PyTorch's name) of each parameter
// that has one.
type SGD struct {
	LR, Momentum float64

	vel map[*Param]*tensor.Dense
}

// checkParams checks every parameter (and rejects duplicates) before an
// update changes any of them.
func checkParams(where string, params []*Param) error {
	seen := make(map[*Param]bool, len(params))
	for i, p := range params {
		if err := checkParam(where, p); err != nil {
			return fmt.Errorf("%w (parameter %d)", err, i)
		}
		if seen[p] {
			return fmt.Errorf("nn: %s: parameter %d (%q) appears twice", where, i, p.Name)
		}
		seen[p] = true
	}
	return nil
}

// checkState checks that an optimizer state tensor still fits its
// parameter.
func checkState(where string, p *Param, st *tensor.Dense) error {
	if !sameShape(st.Shape(), p.Value.Shape()) || st.Dtype() != p.Value.Dtype() {
		return fmt.Errorf("nn: %s: parameter %q is now %v %v but its optimizer state is %v %v",
			where, p.Name, p.Value.Dtype(), p.Value.Shape(), st.Dtype(), st.Shape())
	}
	return nil
}

func finite(where string, kv ...any) error {
	for i := 0; i < len(kv); i += 2 {
		if v := kv[i+1].(float64); math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("nn: %s: %s is %v", where, kv[i], v)
		}
	}
	return nil
}

// Step applies one update to every parameter. It does not clear the
// gradients.
func (o *SGD) Step(params []*Param) error {
	const where = "SGD.Step"
	if err := finite(where, "LR", o.LR, "Momentum", o.Momentum); err != nil {
		return err
	}
	if o.Momentum < 0 {
		return fmt.Errorf("nn: %s: Momentum %v is negative", where, o.Momentum)
	}
	if err := checkParams(where, params); err != nil {
		return err
	}
	if o.Momentum != 0 {
		if o.vel == nil {
			o.vel = make(map[*Param]*tensor.Dense)
		}
		for _, p := range params {
			if v := o.vel[p]; v != nil {
				if err := checkState(where, p, v); err != nil {
					return err
				}
			}
		}
	}
	for _, p := range params {
		var vel *tensor.Dense
		first := false
		if o.Momentum != 0 {
			if vel = o.vel[p]; vel == nil {
				vel = tensor.New(tensor.WithShape(p.Value.Shape().Clone()...), tensor.Of(p.Value.Dtype()))
				o.vel[p], first = vel, true
			}
		}
		switch p.Value.Dtype() {
		case tensor.Float32:
			sgdStep(data[float32](p.Value), data[float32](p.Grad), velData[float32](vel), float32(o.LR), float32(o.Momentum), first)
		default:
			sgdStep(data[float64](p.Value), data[float64](p.Grad), velData[float64](vel), o.LR, o.Momentum, first)
		}
	}
	return nil
}

func velData[T float](v *tensor.Dense) []T {
	if v == nil {
		return nil
	}
	return data[T](v)
}

func sgdStep[T float](p, g, v []T, lr, mu T, first bool) {
	g = g[:len(p)]
	if v == nil {
		for i := range p {
			p[i] -= lr * g[i]
		}
		return
	}
	v = v[:len(p)]
	for i := range p {
		if first {
			v[i] = g[i]
		} else {
			v[i] = mu*v[i] + g[i]
		}
		p[i] -= lr * v[i]
	}
}
