package pipe

import (
	"fmt"

	"gorgonia.org/tensor"
)

// MultiStage is a model chunk whose input and output are ordered sets of
// tensors (hidden states with a mask, positions): Multi makes it a Stage.
//
// Forward takes the set its predecessor returned (on the first stage, the
// set the DataSource packed) and returns its own set and a context.
// BackwardInput gets one gradient per output part (dys[i] for ys[i]) and
// returns one per input part; BackwardWeight accumulates the weight
// gradients. A part that has no gradient (a mask, positions, an integer
// index held in floats) gets nil: the stage returns nil in dxs for it, and
// finds nil in dys for such an output. The first stage may return nil dxs.
// The tensors it receives are its own (Unpack's copies), and those it
// returns are copied into the carrier, so it may keep or reuse either; but
// BackwardWeight gets the very dys BackwardInput got (the adapter unpacks
// a chunk's gradient once), so BackwardInput must not modify them.
type MultiStage interface {
	Forward(xs []*tensor.Dense) (ys []*tensor.Dense, saved any, err error)
	BackwardInput(saved any, dys []*tensor.Dense) (dxs []*tensor.Dense, err error)
	BackwardWeight(saved any, dys []*tensor.Dense) error
}

// MultiLoss is the loss of a last stage that is a MultiStage: it gets the
// stage's output set and returns one gradient per part (nil for a part
// that has none). MultiLossOf makes it a Loss.
type MultiLoss interface {
	Loss(ys []*tensor.Dense, target *tensor.Dense) (loss float64, dys []*tensor.Dense, err error)
}

// Multi returns the Stage that runs m on carriers (Pack): its Forward
// unpacks the input, runs m and packs the output; its backwards unpack the
// gradient (once per chunk: BackwardWeight reuses BackwardInput's) and
// pack the input gradient. So a set crosses every boundary as one tensor,
// one message per transfer on every transport, and its shapes may change
// from one micro-batch to the next; the schedule and the generated code
// are those of single tensors.
//
// The adapter passes through the optional interfaces of m: it is a
// Swapper (handed m's own saved contexts), SwapWaiter, CopyGrads or Tied
// when m is one, and its Sharded steps and Release call m's when m is
// Sharded or a Releaser (and do nothing otherwise, as for a stage that is
// not). Each call of Multi makes
// a new object: the overlap steps may run two of them at once, so wrap one
// MultiStage once (or set Config.SerialOverlap).
func Multi(m MultiStage) Stage {
	base := &multi{m: m}
	_, sw := m.(Swapper)
	_, cg := m.(CopyGrads)
	_, td := m.(Tied)
	switch {
	case sw && cg && td:
		return &struct {
			*multi
			multiSwap
			multiCopy
			multiTied
		}{base, multiSwap{base}, multiCopy{base}, multiTied{base}}
	case sw && cg:
		return &struct {
			*multi
			multiSwap
			multiCopy
		}{base, multiSwap{base}, multiCopy{base}}
	case sw && td:
		return &struct {
			*multi
			multiSwap
			multiTied
		}{base, multiSwap{base}, multiTied{base}}
	case cg && td:
		return &struct {
			*multi
			multiCopy
			multiTied
		}{base, multiCopy{base}, multiTied{base}}
	case sw:
		return &struct {
			*multi
			multiSwap
		}{base, multiSwap{base}}
	case cg:
		return &struct {
			*multi
			multiCopy
		}{base, multiCopy{base}}
	case td:
		return &struct {
			*multi
			multiTied
		}{base, multiTied{base}}
	}
	return base
}

// multi is the adapter of Multi.
type multi struct{ m MultiStage }

// multiSaved is the adapter's context of a chunk: m's, the number of
// parts in and out, and the output gradient set once BackwardInput
// unpacked it.
type multiSaved struct {
	inner   any
	nIn     int
	nOut    int
	dy      *tensor.Dense
	dys     []*tensor.Dense
	swapped bool
}

func (a *multi) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	xs, err := Unpack(x)
	if err != nil {
		return nil, nil, fmt.Errorf("multi-tensor stage %T: input: %w", a.m, err)
	}
	ys, saved, err := a.m.Forward(xs)
	if err != nil {
		return nil, nil, err
	}
	y, err := Pack(ys)
	if err != nil {
		return nil, nil, fmt.Errorf("multi-tensor stage %T: output: %w", a.m, err)
	}
	return y, &multiSaved{inner: saved, nIn: len(xs), nOut: len(ys)}, nil
}

// context returns the chunk's context and its output gradient set,
// unpacking dy unless this chunk's BackwardInput already did.
func (a *multi) context(where string, saved any, dy *tensor.Dense) (*multiSaved, []*tensor.Dense, error) {
	s, ok := saved.(*multiSaved)
	if !ok || s.swapped {
		return nil, nil, fmt.Errorf("multi-tensor stage %T: %s: the context is a %T, not one its Forward returned (or still swapped out)", a.m, where, saved)
	}
	if s.dys != nil && s.dy == dy {
		return s, s.dys, nil
	}
	dys, err := Unpack(dy)
	if err != nil {
		return nil, nil, fmt.Errorf("multi-tensor stage %T: %s: output gradient: %w", a.m, where, err)
	}
	if len(dys) != s.nOut {
		return nil, nil, fmt.Errorf("multi-tensor stage %T: %s: %d output gradients for %d outputs; want one per output (nil for one without a gradient)", a.m, where, len(dys), s.nOut)
	}
	s.dy, s.dys = dy, dys
	return s, dys, nil
}

func (a *multi) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	s, dys, err := a.context("BackwardInput", saved, dy)
	if err != nil {
		return nil, err
	}
	dxs, err := a.m.BackwardInput(s.inner, dys)
	if err != nil || dxs == nil {
		return nil, err
	}
	if len(dxs) != s.nIn {
		return nil, fmt.Errorf("multi-tensor stage %T: BackwardInput returned %d input gradients for %d inputs; want one per input (nil for one without a gradient)", a.m, len(dxs), s.nIn)
	}
	dx, err := Pack(dxs)
	if err != nil {
		return nil, fmt.Errorf("multi-tensor stage %T: input gradient: %w", a.m, err)
	}
	return dx, nil
}

func (a *multi) BackwardWeight(saved any, dy *tensor.Dense) error {
	s, dys, err := a.context("BackwardWeight", saved, dy)
	if err != nil {
		return err
	}
	err = a.m.BackwardWeight(s.inner, dys)
	s.dy, s.dys = nil, nil // the chunk is done: drop the set early
	return err
}

// Unshard, Reshard and ReduceGrad call m's when m is Sharded.
func (a *multi) Unshard() error    { return a.sharded(Sharded.Unshard) }
func (a *multi) Reshard() error    { return a.sharded(Sharded.Reshard) }
func (a *multi) ReduceGrad() error { return a.sharded(Sharded.ReduceGrad) }

func (a *multi) sharded(f func(Sharded) error) error {
	if s, ok := a.m.(Sharded); ok {
		return f(s)
	}
	return nil
}

// Release hands m its own context when m is a Releaser (a forward-only
// program ends each context so; see Releaser), and does nothing otherwise:
// the context is left to the garbage collector, as for any stage without
// Release.
func (a *multi) Release(saved any) error {
	r, ok := a.m.(Releaser)
	if !ok {
		return nil
	}
	s, ok := saved.(*multiSaved)
	if !ok || s.swapped {
		return fmt.Errorf("multi-tensor stage %T: Release: the context is a %T, not one its Forward returned (or swapped out)", a.m, saved)
	}
	return r.Release(s.inner)
}

// multiSwap passes Swapper (and SwapWaiter) through to m, with m's own
// contexts: Offload returns a context whose inner value is m's handle.
type multiSwap struct{ a *multi }

func (p multiSwap) Offload(saved any) (any, error) {
	s, ok := saved.(*multiSaved)
	if !ok || s.swapped {
		return nil, fmt.Errorf("multi-tensor stage %T: Offload: the context is a %T, not one its Forward returned (or already swapped out)", p.a.m, saved)
	}
	h, err := p.a.m.(Swapper).Offload(s.inner)
	if err != nil {
		return nil, err
	}
	out := *s
	// The unpacked gradient set (between I and W) stays out of the
	// working set too: W unpacks it again after Load.
	out.inner, out.swapped, out.dy, out.dys = h, true, nil, nil
	return &out, nil
}

func (p multiSwap) Load(handle any) (any, error) {
	s, ok := handle.(*multiSaved)
	if !ok || !s.swapped {
		return nil, fmt.Errorf("multi-tensor stage %T: Load: the handle is a %T, not one its Offload returned", p.a.m, handle)
	}
	saved, err := p.a.m.(Swapper).Load(s.inner)
	if err != nil {
		return nil, err
	}
	out := *s
	out.inner, out.swapped = saved, false
	return &out, nil
}

func (p multiSwap) WaitOffload(handle any) error {
	w, ok := p.a.m.(SwapWaiter)
	if !ok {
		return nil
	}
	s, ok := handle.(*multiSaved)
	if !ok || !s.swapped {
		return fmt.Errorf("multi-tensor stage %T: WaitOffload: the handle is a %T, not one its Offload returned", p.a.m, handle)
	}
	return w.WaitOffload(s.inner)
}

// multiCopy passes CopyGrads through.
type multiCopy struct{ a *multi }

func (p multiCopy) Grads() []*tensor.Dense { return p.a.m.(CopyGrads).Grads() }

// multiTied passes Tied through.
type multiTied struct{ a *multi }

func (p multiTied) TiedGrads() []*tensor.Dense { return p.a.m.(Tied).TiedGrads() }

// MultiLossOf returns the Loss that unpacks the last stage's output set,
// runs l on it and packs the gradients l returns (one per part, nil for a
// part without one).
func MultiLossOf(l MultiLoss) Loss { return multiLoss{l} }

type multiLoss struct{ l MultiLoss }

func (m multiLoss) Loss(y, target *tensor.Dense) (float64, *tensor.Dense, error) {
	ys, err := Unpack(y)
	if err != nil {
		return 0, nil, fmt.Errorf("multi-tensor loss %T: output: %w", m.l, err)
	}
	loss, dys, err := m.l.Loss(ys, target)
	if err != nil {
		return 0, nil, err
	}
	if len(dys) != len(ys) {
		return 0, nil, fmt.Errorf("multi-tensor loss %T: %d gradients for %d outputs; want one per output (nil for one without a gradient)", m.l, len(dys), len(ys))
	}
	dy, err := Pack(dys)
	if err != nil {
		return 0, nil, fmt.Errorf("multi-tensor loss %T: gradient: %w", m.l, err)
	}
	return loss, dy, nil
}

// MultiBatches is a DataSource of sets over fixed slices: Input(m) packs
// Inputs[m]. (A DataSource of its own returns Pack of its set as well; a
// target may be a set too, packed, which the MultiLoss unpacks.)
type MultiBatches struct {
	Inputs  [][]*tensor.Dense
	Targets []*tensor.Dense
}

// Input returns Pack(Inputs[micro]).
func (b MultiBatches) Input(micro int) (*tensor.Dense, error) {
	if micro < 0 || micro >= len(b.Inputs) {
		return nil, fmt.Errorf("no input set for micro-batch %d (have %d)", micro, len(b.Inputs))
	}
	return Pack(b.Inputs[micro])
}

// Target returns Targets[micro].
func (b MultiBatches) Target(micro int) (*tensor.Dense, error) {
	return MicroBatches{Targets: b.Targets}.Target(micro)
}
