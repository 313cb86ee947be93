package pipe

import (
	"errors"
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/value"
)

// ValueStage is a model chunk on the values of another array library
// (package value: dtype, shape, bytes): FromValues makes it a Stage. Its
// methods are Stage's, on values: Forward gets its input as a value of the
// adapter's Maker's library (a gonumvalue.Matrix for gonumvalue.Maker) and
// returns its output and a context; BackwardInput returns the input
// gradient (nil is allowed on stage 0); BackwardWeight accumulates the
// weight gradients, and gets the very dy value BackwardInput got (the
// adapter converts a chunk's gradient once), so BackwardInput must not
// modify it. Stage's ownership rules hold for the values: an input x or a
// gradient dy may view memory the runtime lends (a received tensor's), so
// the stage keeps neither after the chunk's backward returns; and it must
// not modify a value after returning it (it may be in flight to a peer, or
// the next stage's input on this rank).
type ValueStage interface {
	Forward(x value.Value) (y value.Value, saved any, err error)
	BackwardInput(saved any, dy value.Value) (dx value.Value, err error)
	BackwardWeight(saved any, dy value.Value) error
}

// ValueLoss is the loss of a last stage that is a ValueStage: it gets the
// stage's output and the labels as values and returns the loss and the
// output gradient. FromValuesLoss makes it a Loss.
type ValueLoss interface {
	Loss(y, target value.Value) (loss float64, dy value.Value, err error)
}

// ValueData is a DataSource of values; FromValuesData makes it one.
type ValueData interface {
	Input(micro int) (value.Value, error)
	Target(micro int) (value.Value, error)
}

// ValueCopyGrads is CopyGrads for a ValueStage of a program with two model
// copies, ValueTied is Tied for one in a tie: the values are the stage's
// gradient buffers, which the runtime sums in place, so their Bytes must
// alias their storage (value.IsAliased) and they must stay the stage's
// buffers for its lifetime: FromValues reads them once.
type (
	ValueCopyGrads interface{ Grads() []value.Value }
	ValueTied      interface{ TiedGrads() []value.Value }
)

// FromValues returns the Stage that runs s on values of m's library: its
// Forward views the input tensor's bytes as a value of m (without a copy
// where m is a value.Viewer and the bytes are aligned; else m makes one and
// the bytes are copied), runs s, and views the output as a tensor
// (value.ToDense: a *value.Tensor's own tensor, else a tensor over the
// value's bytes, or a copy where they are misaligned); the backwards do the
// same for the gradients, converting a chunk's output gradient once. The
// slots and the transports keep their tensors: a value of another library
// crosses the boundary as its bytes.
//
// The adapter passes through the optional interfaces of s: it is a Swapper
// (handed s's own contexts) and SwapWaiter when s is a Swapper, its Sharded
// steps call s's when s is Sharded, and it is a CopyGrads when s is a
// ValueCopyGrads and a Tied when s is a ValueTied. Those gradient values
// are read once, here, checked (layout, aliasing) and viewed as tensors;
// FromValues returns the error of one that cannot be. As with Multi, each
// call makes a new object: wrap one ValueStage once.
func FromValues(s ValueStage, m value.Maker) (Stage, error) {
	if s == nil || m == nil {
		return nil, fmt.Errorf("pipe.FromValues: nil stage (%T) or Maker (%T)", s, m)
	}
	base := &valueStage{s: s, m: m}
	var err error
	cg, isCG := s.(ValueCopyGrads)
	if isCG {
		if base.grads, err = gradTensors(cg.Grads()); err != nil {
			return nil, fmt.Errorf("pipe.FromValues: stage %T: Grads: %w", s, err)
		}
	}
	td, isTied := s.(ValueTied)
	if isTied {
		if base.tied, err = gradTensors(td.TiedGrads()); err != nil {
			return nil, fmt.Errorf("pipe.FromValues: stage %T: TiedGrads: %w", s, err)
		}
	}
	_, sw := s.(Swapper)
	vs, vc, vt := valueSwap{base}, valueCopy{base}, valueTied{base}
	switch {
	case sw && isCG && isTied:
		return &struct {
			*valueStage
			valueSwap
			valueCopy
			valueTied
		}{base, vs, vc, vt}, nil
	case sw && isCG:
		return &struct {
			*valueStage
			valueSwap
			valueCopy
		}{base, vs, vc}, nil
	case sw && isTied:
		return &struct {
			*valueStage
			valueSwap
			valueTied
		}{base, vs, vt}, nil
	case isCG && isTied:
		return &struct {
			*valueStage
			valueCopy
			valueTied
		}{base, vc, vt}, nil
	case sw:
		return &struct {
			*valueStage
			valueSwap
		}{base, vs}, nil
	case isCG:
		return &struct {
			*valueStage
			valueCopy
		}{base, vc}, nil
	case isTied:
		return &struct {
			*valueStage
			valueTied
		}{base, vt}, nil
	}
	return base, nil
}

// gradTensors views gradient values as tensors that share their storage
// (value.AliasDense), so that the runtime's sums land in them.
func gradTensors(vs []value.Value) ([]*tensor.Dense, error) {
	out := make([]*tensor.Dense, len(vs))
	for i, v := range vs {
		t, err := value.AliasDense(v)
		if err != nil {
			return nil, fmt.Errorf("gradient %d: %w (the runtime sums gradients in place)", i, err)
		}
		out[i] = t
	}
	return out, nil
}

// valueStage is the adapter of FromValues.
type valueStage struct {
	s     ValueStage
	m     value.Maker
	grads []*tensor.Dense // s's Grads as tensors (ValueCopyGrads)
	tied  []*tensor.Dense // s's TiedGrads as tensors (ValueTied)
}

// valueSaved is the adapter's context of a chunk: s's, and the output
// gradient as a value once BackwardInput converted it.
type valueSaved struct {
	inner   any
	dy      *tensor.Dense
	dyv     value.Value
	swapped bool
}

// in returns t as a value of the Maker's library.
func (a *valueStage) in(t *tensor.Dense) (value.Value, error) {
	b, err := wire.PayloadOf(t)
	if err != nil {
		return nil, err
	}
	return value.Build(a.m, value.Dtype(b.Dtype), b.Dims, b.Raw)
}

func (a *valueStage) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	xv, err := a.in(x)
	if err != nil {
		return nil, nil, fmt.Errorf("value stage %T: input: %w", a.s, err)
	}
	yv, saved, err := a.s.Forward(xv)
	if err != nil {
		return nil, nil, err
	}
	y, err := value.ToDense(yv)
	if err != nil {
		return nil, nil, fmt.Errorf("value stage %T: output: %w", a.s, err)
	}
	return y, &valueSaved{inner: saved}, nil
}

// context returns the chunk's context and its output gradient as a value,
// converting dy unless this chunk's BackwardInput already did.
func (a *valueStage) context(where string, saved any, dy *tensor.Dense) (*valueSaved, value.Value, error) {
	s, ok := saved.(*valueSaved)
	if !ok || s.swapped {
		return nil, nil, fmt.Errorf("value stage %T: %s: the context is a %T, not one its Forward returned (or still swapped out)", a.s, where, saved)
	}
	if s.dyv != nil && s.dy == dy {
		return s, s.dyv, nil
	}
	dyv, err := a.in(dy)
	if err != nil {
		return nil, nil, fmt.Errorf("value stage %T: %s: output gradient: %w", a.s, where, err)
	}
	s.dy, s.dyv = dy, dyv
	return s, dyv, nil
}

func (a *valueStage) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	s, dyv, err := a.context("BackwardInput", saved, dy)
	if err != nil {
		return nil, err
	}
	dxv, err := a.s.BackwardInput(s.inner, dyv)
	if err != nil || dxv == nil {
		return nil, err
	}
	dx, err := value.ToDense(dxv)
	if err != nil {
		return nil, fmt.Errorf("value stage %T: input gradient: %w", a.s, err)
	}
	return dx, nil
}

func (a *valueStage) BackwardWeight(saved any, dy *tensor.Dense) error {
	s, dyv, err := a.context("BackwardWeight", saved, dy)
	if err != nil {
		return err
	}
	err = a.s.BackwardWeight(s.inner, dyv)
	s.dy, s.dyv = nil, nil // the chunk is done: drop the view early
	return err
}

// Unshard, Reshard and ReduceGrad call s's when s is Sharded.
func (a *valueStage) Unshard() error    { return a.sharded(Sharded.Unshard) }
func (a *valueStage) Reshard() error    { return a.sharded(Sharded.Reshard) }
func (a *valueStage) ReduceGrad() error { return a.sharded(Sharded.ReduceGrad) }

func (a *valueStage) sharded(f func(Sharded) error) error {
	if s, ok := a.s.(Sharded); ok {
		return f(s)
	}
	return nil
}

// valueSwap passes Swapper (and SwapWaiter) through to s, with s's own
// contexts.
type valueSwap struct{ a *valueStage }

func (p valueSwap) Offload(saved any) (any, error) {
	s, ok := saved.(*valueSaved)
	if !ok || s.swapped {
		return nil, fmt.Errorf("value stage %T: Offload: the context is a %T, not one its Forward returned (or already swapped out)", p.a.s, saved)
	}
	h, err := p.a.s.(Swapper).Offload(s.inner)
	if err != nil {
		return nil, err
	}
	// The converted gradient (between I and W) leaves the working set too.
	return &valueSaved{inner: h, swapped: true}, nil
}

func (p valueSwap) Load(handle any) (any, error) {
	s, ok := handle.(*valueSaved)
	if !ok || !s.swapped {
		return nil, fmt.Errorf("value stage %T: Load: the handle is a %T, not one its Offload returned", p.a.s, handle)
	}
	saved, err := p.a.s.(Swapper).Load(s.inner)
	if err != nil {
		return nil, err
	}
	return &valueSaved{inner: saved}, nil
}

func (p valueSwap) WaitOffload(handle any) error {
	w, ok := p.a.s.(SwapWaiter)
	if !ok {
		return nil
	}
	s, ok := handle.(*valueSaved)
	if !ok || !s.swapped {
		return fmt.Errorf("value stage %T: WaitOffload: the handle is a %T, not one its Offload returned", p.a.s, handle)
	}
	return w.WaitOffload(s.inner)
}

// valueCopy is CopyGrads over the stage's gradient values.
type valueCopy struct{ a *valueStage }

func (p valueCopy) Grads() []*tensor.Dense { return p.a.grads }

// valueTied is Tied over the stage's tied gradient values.
type valueTied struct{ a *valueStage }

func (p valueTied) TiedGrads() []*tensor.Dense { return p.a.tied }

// FromValuesLoss returns the Loss that runs l on values of m's library:
// the output and the labels converted as FromValues converts a stage's
// input, the gradient as its output.
func FromValuesLoss(l ValueLoss, m value.Maker) Loss { return valueLoss{l, &valueStage{m: m}} }

type valueLoss struct {
	l  ValueLoss
	cv *valueStage // its in converts
}

func (v valueLoss) Loss(y, target *tensor.Dense) (float64, *tensor.Dense, error) {
	if v.l == nil || v.cv.m == nil {
		return 0, nil, errors.New("pipe.FromValuesLoss: nil loss or Maker")
	}
	yv, err := v.cv.in(y)
	if err != nil {
		return 0, nil, fmt.Errorf("value loss %T: output: %w", v.l, err)
	}
	tv, err := v.cv.in(target)
	if err != nil {
		return 0, nil, fmt.Errorf("value loss %T: target: %w", v.l, err)
	}
	loss, dyv, err := v.l.Loss(yv, tv)
	if err != nil {
		return 0, nil, err
	}
	dy, err := value.ToDense(dyv)
	if err != nil {
		return 0, nil, fmt.Errorf("value loss %T: gradient: %w", v.l, err)
	}
	return loss, dy, nil
}

// FromValuesData returns the DataSource that returns d's values as tensors
// (value.ToDense: over their bytes where they are aligned, so the runtime
// reads, and never writes, the values' memory).
func FromValuesData(d ValueData) DataSource { return valueData{d} }

type valueData struct{ d ValueData }

func (v valueData) Input(micro int) (*tensor.Dense, error) {
	return v.get("Input", micro, ValueData.Input)
}

func (v valueData) Target(micro int) (*tensor.Dense, error) {
	return v.get("Target", micro, ValueData.Target)
}

func (v valueData) get(what string, micro int, f func(ValueData, int) (value.Value, error)) (*tensor.Dense, error) {
	if v.d == nil {
		return nil, errors.New("pipe.FromValuesData: nil data source")
	}
	x, err := f(v.d, micro)
	if err != nil {
		return nil, err
	}
	t, err := value.ToDense(x)
	if err != nil {
		return nil, fmt.Errorf("value data %T: %s(%d): %w", v.d, what, micro, err)
	}
	return t, nil
}
