package nn

import (
	"fmt"

	"gorgonia.org/tensor"
)

// Param is one trainable tensor and its gradient, which has the same shape
// and dtype. Backward passes add to Grad. ZeroGrad clears it.
type Param struct {
	Name  string
	Value *tensor.Dense
	Grad  *tensor.Dense
}

// Layer is a model component with a split backward pass. Linear, ReLU, Tanh,
// GELU and Sequential are Layers. A Sequential calls BackwardWeight only on
// inner layers whose Params are not empty.
type Layer interface {
	// Forward computes y from x and returns a context for the backward
	// calls.
	Forward(x *tensor.Dense) (y *tensor.Dense, saved any, err error)
	// BackwardInput returns the gradient with respect to x.
	BackwardInput(saved any, dy *tensor.Dense) (dx *tensor.Dense, err error)
	// BackwardWeight adds the parameter gradients to Param.Grad.
	BackwardWeight(saved any, dy *tensor.Dense) error
	// Params returns the layer's parameters: the same pointers on every
	// call.
	Params() []*Param
}

// ZeroGrad sets every parameter's gradient to zero.
func ZeroGrad(params []*Param) {
	for _, p := range params {
		if p == nil || p.Grad == nil {
			continue
		}
		p.Grad.Zero()
	}
}

// checkParam checks that p has a value and a gradient of the same shape and
// a supported dtype, and that they are plain contiguous tensors.
func checkParam(where string, p *Param) error {
	if p == nil {
		return fmt.Errorf("nn: %s: nil *Param", where)
	}
	if p.Value == nil || p.Grad == nil {
		return fmt.Errorf("nn: %s: parameter %q has a nil Value or Grad", where, p.Name)
	}
	vs, gs := p.Value.Shape(), p.Grad.Shape()
	if !sameShape(vs, gs) {
		return fmt.Errorf("nn: %s: parameter %q has value shape %v but gradient shape %v", where, p.Name, vs, gs)
	}
	if p.Value.Dtype() != p.Grad.Dtype() || !checkDtype(p.Value.Dtype()) {
		return fmt.Errorf("nn: %s: parameter %q %v has value dtype %v and gradient dtype %v, want both float32 or both float64",
			where, p.Name, vs, p.Value.Dtype(), p.Grad.Dtype())
	}
	for _, t := range []*tensor.Dense{p.Value, p.Grad} {
		if t.IsMaterializable() || t.IsMasked() {
			return fmt.Errorf("nn: %s: parameter %q %v is a view, transposed or masked; want a plain tensor", where, p.Name, vs)
		}
		if _, err := contiguous(where, "parameter "+p.Name, t); err != nil {
			return err
		}
	}
	return nil
}
