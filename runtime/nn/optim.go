package nn

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"
)

// Optimizer updates parameters from their accumulated gradients.
type Optimizer interface {
	Step(params []*Param) error
}

// SGD is stochastic gradient descent with optional momentum, in PyTorch's
// convention:
//
//	v ← Momentum·v + g   (v = g on a parameter's first step)
//	p ← p - LR·v
//
// With Momentum 0 it is p ← p - LR·g. The velocity is kept per *Param.
type SGD struct {
	LR, Momentum float64

	vel map[*Param]*tensor.Dense
}

// Adam is the Adam optimizer in PyTorch's convention, with bias correction
// and a per-parameter step count t:
//
//	m ← Beta1·m + (1-Beta1)·g
//	v ← Beta2·v + (1-Beta2)·g²
//	p ← p - LR · (m/(1-Beta1^t)) / (sqrt(v/(1-Beta2^t)) + Eps)
//
// NewAdam sets the usual defaults. The moments are kept per *Param in the
// parameter's dtype. The update is computed in float64.
type Adam struct {
	LR, Beta1, Beta2, Eps float64

	state map[*Param]*adamState
}

type adamState struct {
	m, v *tensor.Dense
	t    int
}

// NewAdam returns Adam with learning rate lr, Beta1 0.9, Beta2 0.999 and
// Eps 1e-8.
func NewAdam(lr float64) *Adam { return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8} }

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

// Step applies one update to every parameter. It does not clear the
// gradients.
func (o *Adam) Step(params []*Param) error {
	const where = "Adam.Step"
	if err := finite(where, "LR", o.LR, "Beta1", o.Beta1, "Beta2", o.Beta2, "Eps", o.Eps); err != nil {
		return err
	}
	if o.Beta1 < 0 || o.Beta1 >= 1 || o.Beta2 < 0 || o.Beta2 >= 1 {
		return fmt.Errorf("nn: %s: Beta1 %v and Beta2 %v must lie in [0, 1)", where, o.Beta1, o.Beta2)
	}
	if o.Eps <= 0 {
		return fmt.Errorf("nn: %s: Eps %v must be positive (NewAdam sets 1e-8)", where, o.Eps)
	}
	if err := checkParams(where, params); err != nil {
		return err
	}
	if o.state == nil {
		o.state = make(map[*Param]*adamState)
	}
	for _, p := range params {
		if st := o.state[p]; st != nil {
			if err := checkState(where, p, st.m); err != nil {
				return err
			}
		}
	}
	for _, p := range params {
		st := o.state[p]
		if st == nil {
			sh, dt := p.Value.Shape().Clone(), p.Value.Dtype()
			st = &adamState{m: tensor.New(tensor.WithShape(sh...), tensor.Of(dt)), v: tensor.New(tensor.WithShape(sh...), tensor.Of(dt))}
			o.state[p] = st
		}
		st.t++
		c1 := 1 - math.Pow(o.Beta1, float64(st.t))
		c2 := 1 - math.Pow(o.Beta2, float64(st.t))
		switch p.Value.Dtype() {
		case tensor.Float32:
			adamStep(data[float32](p.Value), data[float32](p.Grad), data[float32](st.m), data[float32](st.v), o, c1, c2)
		default:
			adamStep(data[float64](p.Value), data[float64](p.Grad), data[float64](st.m), data[float64](st.v), o, c1, c2)
		}
	}
	return nil
}

func adamStep[T float](p, g, m, v []T, o *Adam, c1, c2 float64) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	b1, b2 := o.Beta1, o.Beta2
	for i := range p {
		gi := float64(g[i])
		mi := b1*float64(m[i]) + (1-b1)*gi
		vi := b2*float64(v[i]) + (1-b2)*gi*gi
		m[i], v[i] = T(mi), T(vi)
		p[i] = T(float64(p[i]) - o.LR*(mi/c1)/(math.Sqrt(vi/c2)+o.Eps))
	}
}
