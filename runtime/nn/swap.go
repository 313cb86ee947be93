package nn

import (
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/swap"
)

// Swappable is implemented by saved contexts (what a Layer's Forward
// returns) whose tensors can be moved out of the working set and back. The
// contexts of Linear, ReLU, Tanh, GELU and Sequential implement it; a
// Layer of your own whose context implements it can be swapped too.
//
// SavedTensors returns the tensors the context holds, in a fixed order; nil
// entries are allowed and count. SetSavedTensors puts tensors back in the
// same order: it gets as many entries as SavedTensors returned, either all
// nil (the context drops its references while its data is out) or the
// tensors SavedTensors returned, or copies of them with equal shapes,
// dtypes and values. The number of entries must not change in between.
type Swappable interface {
	SavedTensors() ([]*tensor.Dense, error)
	SetSavedTensors(ts []*tensor.Dense) error
}

func (s *linearSaved) SavedTensors() ([]*tensor.Dense, error) {
	return []*tensor.Dense{s.x}, nil
}

func (s *linearSaved) SetSavedTensors(ts []*tensor.Dense) error {
	const where = "Linear saved context"
	x, rows, cols, err := restoreOne(where, "restored input", ts)
	if err != nil {
		return err
	}
	if x != nil && (rows != s.rows || cols != s.l.In || x.Dtype() != s.l.dtype) {
		return fmt.Errorf("nn: %s: restored input is %v %v, want %v (%d, %d)", where, x.Dtype(), x.Shape(), s.l.dtype, s.rows, s.l.In)
	}
	s.x = x
	return nil
}

func (s *actSaved) SavedTensors() ([]*tensor.Dense, error) {
	return []*tensor.Dense{s.t}, nil
}

func (s *actSaved) SetSavedTensors(ts []*tensor.Dense) error {
	t, _, _, err := restoreOne(s.kind+" saved context", "restored tensor", ts)
	if err != nil {
		return err
	}
	s.t = t
	return nil
}

// restoreOne checks the one tensor SetSavedTensors restores (what, in
// where): nil (the context holds none) or a matrix, with its shape.
func restoreOne(where, what string, ts []*tensor.Dense) (*tensor.Dense, int, int, error) {
	if len(ts) != 1 {
		return nil, 0, 0, fmt.Errorf("nn: %s: %d tensors given, want 1", where, len(ts))
	}
	if ts[0] == nil {
		return nil, 0, 0, nil
	}
	return matrix(where, what, ts[0])
}

// swappable returns ctx as a Swappable, or why it is not one.
func swappable(i int, l Layer, ctx any) (Swappable, error) {
	sw, ok := ctx.(Swappable)
	if !ok {
		return nil, fmt.Errorf("nn: layer %d (%T): its saved context %T does not implement nn.Swappable, so it cannot be swapped", i, l, ctx)
	}
	return sw, nil
}

// SavedTensors lists the tensors of every inner layer's context (none for
// a released one) and then the output gradients kept for BackwardWeight,
// one entry per layer.
func (sv *seqSaved) SavedTensors() ([]*tensor.Dense, error) {
	var ts []*tensor.Dense
	for i, ctx := range sv.ctx {
		if ctx == nil {
			continue
		}
		sw, err := swappable(i, sv.s.Layers[i], ctx)
		if err != nil {
			return nil, err
		}
		inner, err := sw.SavedTensors()
		if err != nil {
			return nil, err
		}
		ts = append(ts, inner...)
	}
	return append(ts, sv.dys...), nil
}

func (sv *seqSaved) SetSavedTensors(ts []*tensor.Dense) error {
	// The inner outputs and gradients are the tier's now, or copies of
	// them come back: the context gives none back (see giveBack).
	clear(sv.outs)
	sv.swapped = true
	k := 0
	for i, ctx := range sv.ctx {
		if ctx == nil {
			continue
		}
		sw, err := swappable(i, sv.s.Layers[i], ctx)
		if err != nil {
			return err
		}
		inner, err := sw.SavedTensors()
		if err != nil {
			return err
		}
		if k+len(inner) > len(ts) {
			return fmt.Errorf("nn: Sequential saved context: %d tensors given, too few for layer %d", len(ts), i)
		}
		if err := sw.SetSavedTensors(ts[k : k+len(inner)]); err != nil {
			return layerErr("Sequential saved context", i, sv.s.Layers[i], err)
		}
		k += len(inner)
	}
	if len(ts)-k != len(sv.dys) {
		return fmt.Errorf("nn: Sequential saved context: %d tensors given, want %d", len(ts), k+len(sv.dys))
	}
	copy(sv.dys, ts[k:])
	return nil
}

// Swapping is a Sequential whose saved contexts can be moved to a swap tier
// between their forward and backward: it implements pipe.Swapper and
// pipe.SwapWaiter, so a schedule lowered with swap steps (`ppgen gen
// -swap N`) offloads and loads them. It also tracks every saved context in
// the tier's accounting (swap.Tier.Track) from Forward to the last
// backward, so the tier's Stats give the measured resident activations. With
// a nil Tier it computes exactly as the Sequential and its swap methods
// hand the context back unchanged.
//
// Forward, BackwardInput, BackwardWeight and Backward take and return the
// Swapping's own contexts; the other methods are the Sequential's.
type Swapping struct {
	*Sequential
	Tier *swap.Tier
	// Name labels this stage's offloads in errors, e.g. "stage 2"; the tags
	// read "stage 2 forward #7". Default "Sequential".
	Name string
	n    int // forwards so far
}

// WithSwap returns s as a Swapping on tier.
func WithSwap(s *Sequential, tier *swap.Tier) *Swapping {
	return &Swapping{Sequential: s, Tier: tier}
}

// swapSaved is a Swapping's saved context.
type swapSaved struct {
	w     *Swapping
	sv    *seqSaved
	tag   string
	bytes int64       // bytes tracked in w.Tier (0 without a tier)
	out   *swapHandle // set while offloaded
}

// swapHandle is what Offload returns for a context: it stands for the
// context until Load.
type swapHandle struct {
	c *swapSaved
	h *swap.Handle
	n int // tensors offloaded
}

func (w *Swapping) check(where string) error {
	if w == nil || w.Sequential == nil {
		return fmt.Errorf("nn: %s: nil Swapping or Sequential", where)
	}
	return nil
}

func (w *Swapping) name() string {
	if w.Name == "" {
		return "Sequential"
	}
	return w.Name
}

// Forward runs the Sequential and, with a tier, tracks the saved context's
// bytes. It fails if an inner layer's context does not implement
// Swappable.
func (w *Swapping) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	const where = "Swapping.Forward"
	if err := w.check(where); err != nil {
		return nil, nil, err
	}
	y, saved, err := w.Sequential.Forward(x)
	if err != nil {
		return nil, nil, err
	}
	w.n++
	c := &swapSaved{w: w, sv: saved.(*seqSaved), tag: fmt.Sprintf("%s forward #%d", w.name(), w.n)}
	if w.Tier != nil {
		ts, err := c.sv.SavedTensors()
		if err != nil {
			return nil, nil, fmt.Errorf("nn: %s: %w", where, err)
		}
		c.bytes = swap.SizeOf(ts)
		w.Tier.Track(c.bytes)
	}
	return y, c, nil
}

// ctx checks a saved context given to a backward or to Offload.
func (w *Swapping) ctx(where string, saved any) (*swapSaved, error) {
	if err := w.check(where); err != nil {
		return nil, err
	}
	switch c := saved.(type) {
	case *swapSaved:
		switch {
		case c == nil || c.sv == nil:
			return nil, fmt.Errorf("nn: %s: nil saved context", where)
		case c.w != w:
			return nil, fmt.Errorf("nn: %s: saved context belongs to another Swapping", where)
		case c.out != nil:
			return nil, fmt.Errorf("nn: %s: saved context of %s is swapped out; Load it first", where, c.tag)
		}
		return c, nil
	case *swapHandle:
		return nil, fmt.Errorf("nn: %s: got a swap handle, not a saved context: Load it first", where)
	}
	return nil, fmt.Errorf("nn: %s: saved context is %T, want the one returned by this Swapping's Forward", where, saved)
}

// retrack updates the tracked size of c to its current tensors.
func (w *Swapping) retrack(c *swapSaved) error {
	if w.Tier == nil {
		return nil
	}
	ts, err := c.sv.SavedTensors()
	if err != nil {
		return err
	}
	n := swap.SizeOf(ts)
	w.Tier.Resize(c.bytes, n)
	c.bytes = n
	return nil
}

// BackwardInput runs the Sequential's BackwardInput; with a tier it
// updates the context's tracked bytes (it drops the activation contexts
// and keeps the inner output gradients).
func (w *Swapping) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	const where = "Swapping.BackwardInput"
	c, err := w.ctx(where, saved)
	if err != nil {
		return nil, err
	}
	dx, err := w.Sequential.BackwardInput(c.sv, dy)
	if err != nil {
		return nil, err
	}
	if err := w.retrack(c); err != nil {
		return nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	return dx, nil
}

// BackwardWeight runs the Sequential's BackwardWeight; with a tier it
// untracks the context, whose tensors are released.
func (w *Swapping) BackwardWeight(saved any, dy *tensor.Dense) error {
	c, err := w.ctx("Swapping.BackwardWeight", saved)
	if err != nil {
		return err
	}
	if err := w.Sequential.BackwardWeight(c.sv, dy); err != nil {
		return err
	}
	if w.Tier != nil {
		w.Tier.Untrack(c.bytes)
	}
	c.bytes = 0
	return nil
}

// Release ends a saved context no backward will read (Sequential.Release);
// with a tier it untracks the context, as BackwardWeight does.
func (w *Swapping) Release(saved any) error {
	c, err := w.ctx("Swapping.Release", saved)
	if err != nil {
		return err
	}
	if err := w.Sequential.Release(c.sv); err != nil {
		return err
	}
	if w.Tier != nil {
		w.Tier.Untrack(c.bytes)
	}
	c.bytes = 0
	return nil
}

// Backward runs BackwardInput and then BackwardWeight.
func (w *Swapping) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return fullBackward(w.BackwardInput, w.BackwardWeight, saved, dy)
}

// Offload starts moving the saved context's tensors to the tier and
// returns a handle for it at once; the context drops its references to
// the tensors (the tier's copy holds them until it ends). Without a tier it
// returns saved itself.
func (w *Swapping) Offload(saved any) (any, error) {
	const where = "Swapping.Offload"
	c, err := w.ctx(where, saved)
	if err != nil {
		return nil, err
	}
	if w.Tier == nil {
		return c, nil
	}
	if c.sv.weightDone {
		return nil, fmt.Errorf("nn: %s: %s: BackwardWeight already ran, nothing is left to offload", where, c.tag)
	}
	if err := w.retrack(c); err != nil {
		return nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	ts, err := c.sv.SavedTensors()
	if err != nil {
		return nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	h, err := w.Tier.Offload(ts, c.tag)
	if err != nil {
		return nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	if err := c.sv.SetSavedTensors(make([]*tensor.Dense, len(ts))); err != nil {
		// Cannot happen for nil entries; keep the context usable anyway.
		_ = c.sv.SetSavedTensors(ts)
		return nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	c.out = &swapHandle{c: c, h: h, n: len(ts)}
	return c.out, nil
}

// handle checks a handle given to Load or WaitOffload.
func (w *Swapping) handle(where string, handle any) (*swapHandle, *swapSaved, error) {
	if err := w.check(where); err != nil {
		return nil, nil, err
	}
	switch h := handle.(type) {
	case *swapHandle:
		switch {
		case h == nil || h.c == nil:
			return nil, nil, fmt.Errorf("nn: %s: nil swap handle", where)
		case h.c.w != w:
			return nil, nil, fmt.Errorf("nn: %s: the swap handle belongs to another Swapping", where)
		case w.Tier == nil:
			return nil, nil, fmt.Errorf("nn: %s: %s was offloaded, but the Swapping has no tier now", where, h.c.tag)
		}
		return h, nil, nil
	case *swapSaved:
		// Without a tier, Offload handed the context back as its handle.
		if w.Tier == nil && h != nil && h.w == w {
			return nil, h, nil
		}
	}
	return nil, nil, fmt.Errorf("nn: %s: handle is %T, want one returned by this Swapping's Offload", where, handle)
}

// WaitOffload blocks until the offload of handle has ended (the tensors
// are out of the working set) and returns its error.
func (w *Swapping) WaitOffload(handle any) error {
	const where = "Swapping.WaitOffload"
	h, _, err := w.handle(where, handle)
	if err != nil || h == nil {
		return err
	}
	if err := w.Tier.Wait(h.h); err != nil {
		return fmt.Errorf("nn: %s: %w", where, err)
	}
	return nil
}

// Load waits for the offload of handle if it is still running, brings the
// tensors back (bit-identical) and returns the saved context for the
// backward steps. It is synchronous; a handle is loaded once.
func (w *Swapping) Load(handle any) (any, error) {
	const where = "Swapping.Load"
	h, c, err := w.handle(where, handle)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return c, nil
	}
	ts, err := w.Tier.Load(h.h)
	if err != nil {
		return nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	if len(ts) != h.n {
		return nil, fmt.Errorf("nn: %s: %s: the tier gave back %d tensors, want %d", where, h.c.tag, len(ts), h.n)
	}
	if err := h.c.sv.SetSavedTensors(ts); err != nil {
		return nil, fmt.Errorf("nn: %s: %s: %w", where, h.c.tag, err)
	}
	h.c.out = nil
	return h.c, nil
}
