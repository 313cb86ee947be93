package nn

import (
	"fmt"
	"strings"

	"gorgonia.org/tensor"
)

// Sequential chains layers: the model chunk of one pipeline stage. It
// matches runtime/pipe's Stage interface structurally.
type Sequential struct {
	Layers []Layer
	// recompute marks the layers Select named for selective recompute:
	// Forward keeps the input of each run of them, Drop drops their
	// contexts. nil: none.
	recompute []bool
}

// seqSaved is the context of one Sequential.Forward.
type seqSaved struct {
	s   *Sequential
	ctx []any // ctx[i]: layer i's saved context; nil once no longer needed
	// dys[i] is the gradient with respect to layer i's output, kept by
	// BackwardInput for BackwardWeight for layers i < n-1 that have
	// parameters. The last layer's comes from BackwardWeight's dy.
	dys []*tensor.Dense
	// runIn[i] is the input of layer i when i begins a run of layers
	// Select marked (Forward keeps it for Drop; i > 0).
	runIn []*tensor.Dense
	// outs[i] is layer i's output when it is the Sequential's to hand
	// back (between), given back when the context ends (BackwardWeight);
	// nil where it is not, and all nil once its tensors were swapped
	// (SetSavedTensors) or dropped (Drop).
	outs []*tensor.Dense
	// swapped: the tensors were set by SetSavedTensors (a swap tier's
	// copies may have replaced them); BackwardWeight gives none back.
	swapped    bool
	outShape   tensor.Shape
	outDtype   tensor.Dtype
	inputDone  bool
	weightDone bool
}

// NewSequential returns a Sequential of layers. It prefixes each layer's
// parameter names with the layer's index ("0.weight", "2.bias"; nested
// Sequentials give "1.0.weight"), as PyTorch's state_dict keys do.
func NewSequential(layers ...Layer) *Sequential {
	for i, l := range layers {
		if l == nil {
			continue
		}
		for _, p := range l.Params() {
			if p != nil {
				p.Name = fmt.Sprintf("%d.%s", i, p.Name)
			}
		}
	}
	return &Sequential{Layers: layers}
}

// Params returns the parameters of all layers in order.
func (s *Sequential) Params() []*Param {
	var ps []*Param
	for _, l := range s.Layers {
		if l != nil {
			ps = append(ps, l.Params()...)
		}
	}
	return ps
}

// ZeroGrad clears the gradients of all layers.
func (s *Sequential) ZeroGrad() { ZeroGrad(s.Params()) }

// Grads returns the gradient tensors of all parameters in order (the Grad of
// each of Params). It makes a Sequential a pipe.CopyGrads, so that a
// schedule with two model copies (dualpipe) can sum the copies' gradients in
// place before the optimizer step.
func (s *Sequential) Grads() []*tensor.Dense {
	ps := s.Params()
	gs := make([]*tensor.Dense, len(ps))
	for i, p := range ps {
		gs[i] = p.Grad
	}
	return gs
}

// Forward runs the layers in order. With no layers it returns x.
func (s *Sequential) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	if s == nil {
		return nil, nil, fmt.Errorf("nn: Sequential.Forward: nil *Sequential")
	}
	if _, _, _, err := matrix("Sequential.Forward", "input", x); err != nil {
		return nil, nil, err
	}
	n := len(s.Layers)
	sv := &seqSaved{s: s, ctx: make([]any, n), dys: make([]*tensor.Dense, n), outs: make([]*tensor.Dense, n)}
	if s.recompute != nil {
		sv.runIn = make([]*tensor.Dense, n)
	}
	y := x
	for i, l := range s.Layers {
		if l == nil {
			return nil, nil, fmt.Errorf("nn: Sequential.Forward: layer %d is nil", i)
		}
		if s.runStart(i) {
			sv.runIn[i] = y
		}
		var err error
		y, sv.ctx[i], err = l.Forward(y)
		if err != nil {
			return nil, nil, layerErr("Sequential.Forward", i, l, err)
		}
		if y == nil {
			return nil, nil, fmt.Errorf("nn: Sequential.Forward: layer %d (%T) returned a nil output", i, l)
		}
		if s.between(i) {
			sv.outs[i] = y
		}
	}
	sv.outShape, sv.outDtype = y.Shape().Clone(), y.Dtype()
	return y, sv, nil
}

func (s *Sequential) saved(where string, saved any) (*seqSaved, error) {
	if s == nil {
		return nil, fmt.Errorf("nn: %s: nil *Sequential", where)
	}
	sv, ok := saved.(*seqSaved)
	if !ok || sv == nil {
		return nil, fmt.Errorf("nn: %s: saved context is %T, want the one returned by this Sequential's Forward", where, saved)
	}
	if sv.s != s {
		return nil, fmt.Errorf("nn: %s: saved context belongs to another Sequential", where)
	}
	if sv.weightDone {
		return nil, fmt.Errorf("nn: %s: BackwardWeight already ran on this saved context", where)
	}
	if len(sv.ctx) != len(s.Layers) {
		return nil, fmt.Errorf("nn: %s: Sequential has %d layers but the saved context has %d", where, len(s.Layers), len(sv.ctx))
	}
	return sv, nil
}

func (sv *seqSaved) checkDy(where string, dy *tensor.Dense) error {
	if dy == nil {
		return fmt.Errorf("nn: %s: output gradient is nil, want %v %v", where, sv.outDtype, sv.outShape)
	}
	if !sameShape(dy.Shape(), sv.outShape) || dy.Dtype() != sv.outDtype {
		return fmt.Errorf("nn: %s: output gradient is %v %v, want %v %v like the forward output",
			where, dy.Dtype(), dy.Shape(), sv.outDtype, sv.outShape)
	}
	return nil
}

// BackwardInput runs the layers' BackwardInput in reverse order and returns
// the gradient with respect to the Sequential's input. It keeps each inner
// output gradient that BackwardWeight will need. It can run once per saved
// context.
func (s *Sequential) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	const where = "Sequential.BackwardInput"
	sv, err := s.saved(where, saved)
	if err != nil {
		return nil, err
	}
	if sv.inputDone {
		return nil, fmt.Errorf("nn: %s: already called on this saved context", where)
	}
	if err := sv.checkDy(where, dy); err != nil {
		return nil, err
	}
	n := len(s.Layers)
	g := dy
	for i := n - 1; i >= 0; i-- {
		l := s.Layers[i]
		hasParams := len(l.Params()) > 0
		if i < n-1 && hasParams {
			sv.dys[i] = g
		}
		dx, err := l.BackwardInput(sv.ctx[i], g)
		if err != nil {
			clear(sv.dys)
			return nil, layerErr(where, i, l, err)
		}
		if dx == nil {
			clear(sv.dys)
			return nil, fmt.Errorf("nn: %s: layer %d (%T) returned a nil input gradient", where, i, l)
		}
		if !hasParams && s.between(i) {
			giveBack(g) // layer i+1's input gradient: layer i, its one reader, is done
		}
		g = dx
	}
	// Contexts of layers without parameters are no longer needed.
	for i, l := range s.Layers {
		if len(l.Params()) == 0 {
			sv.ctx[i] = nil
		}
	}
	sv.inputDone = true
	return g, nil
}

// BackwardWeight adds the parameter gradients of every layer to Param.Grad.
// It reuses the output gradients that BackwardInput kept, so BackwardInput
// must have run on this saved context first. dy must hold the same values
// that BackwardInput got. BackwardWeight can run once per saved context.
// Afterwards the context drops its tensors.
func (s *Sequential) BackwardWeight(saved any, dy *tensor.Dense) error {
	const where = "Sequential.BackwardWeight"
	sv, err := s.saved(where, saved)
	if err != nil {
		return err
	}
	if !sv.inputDone {
		return fmt.Errorf("nn: %s: BackwardInput has not run on this saved context; it computes the inner output gradients that BackwardWeight needs", where)
	}
	if err := sv.checkDy(where, dy); err != nil {
		return err
	}
	n := len(s.Layers)
	for i := n - 1; i >= 0; i-- {
		l := s.Layers[i]
		if len(l.Params()) == 0 {
			continue
		}
		g := dy
		if i < n-1 {
			g = sv.dys[i]
		}
		if err := l.BackwardWeight(sv.ctx[i], g); err != nil {
			return layerErr(where, i, l, err)
		}
		if !sv.swapped && s.between(i) {
			giveBack(g) // read by layer i's two backward calls, both done
		}
		sv.ctx[i], sv.dys[i] = nil, nil
	}
	sv.weightDone = true
	for _, t := range sv.outs {
		giveBack(t) // every inner layer is done: nothing reads them
	}
	sv.ctx, sv.dys, sv.outs = nil, nil, nil
	return nil
}

// Release ends a saved context of Forward that no backward will read (an
// evaluation's): it hands the inner layers' outputs and attention's weights
// back for reuse (see the package doc, Buffer reuse). The output Forward
// returned stays the caller's. It returns an error, and changes nothing,
// for a context the backward has started on; the context cannot be used
// afterwards. It makes a Sequential a pipe.Releaser, which a forward-only
// program calls.
func (s *Sequential) Release(saved any) error {
	const where = "Sequential.Release"
	sv, err := s.saved(where, saved)
	if err != nil {
		return err
	}
	if sv.inputDone {
		return fmt.Errorf("nn: %s: the backward already ran on this saved context; BackwardWeight ends it", where)
	}
	sv.release()
	return nil
}

// release ends the context without its backward: see Release.
func (sv *seqSaved) release() {
	for _, ctx := range sv.ctx {
		releaseCtx(ctx)
	}
	for _, t := range sv.outs {
		giveBack(t) // no backward will read them
	}
	sv.inputDone, sv.weightDone = true, true
	sv.ctx, sv.dys, sv.outs = nil, nil, nil
}

// releaseCtx ends an inner layer's saved context that no backward will
// read, handing back what it owns alone: a Sequential's inner outputs
// (nested in a Residual or not) and attention's weights.
func releaseCtx(ctx any) {
	switch c := ctx.(type) {
	case *seqSaved:
		if !c.inputDone && !c.weightDone {
			c.release()
		}
	case *residualSaved:
		releaseCtx(c.inner)
	case *attnSaved:
		if p, ok := c.p.([]float64); ok {
			giveBackSlice(p)
		} else if p, ok := c.p.([]float32); ok {
			giveBackSlice(p)
		}
		c.p, c.qkv, c.released = nil, nil, true
	}
}

// between reports whether the tensors between layers i and i+1 (layer i's
// output, layer i+1's input gradient) are the Sequential's alone to hand
// back: both layers own their results (ownsResults), so neither passes the
// other's tensor on as its own, and the one that reads it is done with it
// when its calls are.
func (s *Sequential) between(i int) bool {
	return i >= 0 && i < len(s.Layers)-1 && ownsResults(s.Layers[i]) && ownsResults(s.Layers[i+1])
}

// ownsResults reports whether l's Forward returns a tensor it allocated
// for the call, which nothing but the call's saved context and the caller
// reads, its BackwardInput likewise a gradient that nothing but the caller
// reads, and no call of it passes a tensor it was given on as its result
// or reads one after its calls on the context are done: the layers of this
// package (a Sequential when its first and last layers do). A layer of
// another package may return its input (a wait, an identity). A Sequential gives such an inner output back when its
// saved context ends, and such an inner gradient once the layer below is
// done with it; other layers' results are left to the garbage collector.
func ownsResults(l Layer) bool {
	switch l := l.(type) {
	case *Linear, *RMSNorm, *Embedding, *TiedHead, *Residual, CausalAttention, ReLU, Tanh, GELU:
		return true
	case *Sequential:
		return l != nil && len(l.Layers) > 0 && ownsResults(l.Layers[0]) && ownsResults(l.Layers[len(l.Layers)-1])
	}
	return false
}

// keepsOutput reports whether l's saved context may read l's own output
// in the backward: ReLU's and Tanh's do (their derivative is taken from
// it), a Sequential's when its last layer's does, and any layer not of
// this package may.
func keepsOutput(l Layer) bool {
	switch l := l.(type) {
	case *Linear, *RMSNorm, *Embedding, *TiedHead, *Residual, CausalAttention, GELU:
		return false
	case *Sequential:
		return l == nil || len(l.Layers) == 0 || keepsOutput(l.Layers[len(l.Layers)-1])
	}
	return true
}

// Backward runs BackwardInput and then BackwardWeight.
func (s *Sequential) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return fullBackward(s.BackwardInput, s.BackwardWeight, saved, dy)
}

// layerError reports an inner layer's error with the layer's position.
type layerError struct {
	where string
	index int
	layer Layer
	err   error
}

func layerErr(where string, i int, l Layer, err error) error {
	return &layerError{where: where, index: i, layer: l, err: err}
}

func (e *layerError) Error() string {
	return fmt.Sprintf("nn: %s: layer %d (%T): %s", e.where, e.index, e.layer, strings.TrimPrefix(e.err.Error(), "nn: "))
}

func (e *layerError) Unwrap() error { return e.err }
