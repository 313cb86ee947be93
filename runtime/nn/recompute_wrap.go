package nn

import (
	"fmt"

	"gorgonia.org/tensor"
)

// recomputable is runtime/pipe's Recomputable (selective recompute: a
// stage that drops and rebuilds some of its layers), which *Sequential
// implements; nn does not import pipe, so the wrappers here test for it
// with this copy of its method set.
type recomputable interface {
	Select(share float64, layers []int) error
	Drop(x *tensor.Dense, saved any) (kept any, err error)
	Rebuild(kept any) (saved any, err error)
}

// releaser is runtime/pipe's Releaser (a stage that reuses what a
// forward-only context holds), which *Sequential and *Swapping implement.
type releaser interface {
	Release(saved any) error
}

// Release passes a forward-only context (one that no backward will read:
// an evaluation's) to the sharded stage when it is a pipe.Releaser, so that
// an evaluation under FSDP reuses the stage's buffers as it does without
// FSDP; for a stage that is not, it does nothing (the context is left to
// the garbage collector, as pipe does for a stage without Release). It
// needs no parameters.
func (f *FSDP) Release(saved any) error {
	if r, ok := f.Stage.(releaser); ok {
		return r.Release(saved)
	}
	return nil
}

// AsStage returns the stage to give runtime/pipe for f: f itself when the
// stage it shards is no pipe.Recomputable, else f with Select, Drop and
// Rebuild passed to that stage (Rebuild waiting for the parameters as
// Forward does), so that a stage of a selective recompute policy
// (Spec.RecomputeShare, RecomputeLayers) recomputes its share under FSDP
// as without it. *FSDP itself does not implement Recomputable: it does
// not make a stage that cannot recompute a share one that claims to.
//
// The result is a runtime/pipe Stage (pipe.Stage's method set) that also
// passes on FSDP's Unshard, Reshard, ReduceGrad and swap methods.
func (f *FSDP) AsStage() interface {
	Forward(x *tensor.Dense) (y *tensor.Dense, saved any, err error)
	BackwardInput(saved any, dy *tensor.Dense) (dx *tensor.Dense, err error)
	BackwardWeight(saved any, dy *tensor.Dense) error
} {
	if _, ok := f.Stage.(recomputable); ok {
		return &recomputingFSDP{f}
	}
	return f
}

// recomputingFSDP is an FSDP whose stage is a pipe.Recomputable: it
// passes Select, Drop and Rebuild to it.
type recomputingFSDP struct{ *FSDP }

// Select passes the selection to the sharded stage (runtime/pipe's New
// calls it before any step: no parameters are needed).
func (f *recomputingFSDP) Select(share float64, layers []int) error {
	return f.Stage.(recomputable).Select(share, layers)
}

// Drop passes the chunk's context to the sharded stage, which keeps what
// its RECOMPUTE needs (it computes nothing: no parameters are needed).
func (f *recomputingFSDP) Drop(x *tensor.Dense, saved any) (any, error) {
	return f.Stage.(recomputable).Drop(x, saved)
}

// Rebuild waits for the stage's parameters, as Forward does, and re-runs
// the dropped layers.
func (f *recomputingFSDP) Rebuild(kept any) (any, error) {
	if err := f.ready("Rebuild"); err != nil {
		return nil, err
	}
	return f.Stage.(recomputable).Rebuild(kept)
}

// swapKept is what a Swapping's chunk keeps between its F and its
// RECOMPUTE under selective recompute: its context, less the layers the
// Sequential's Drop dropped, and what that Drop kept.
type swapKept struct {
	c    *swapSaved
	kept any
}

// Drop is the Sequential's Drop of a Swapping's context: the dropped
// layers' tensors leave the tier's tracked bytes until Rebuild.
func (w *Swapping) Drop(x *tensor.Dense, saved any) (any, error) {
	const where = "Swapping.Drop"
	c, err := w.ctx(where, saved)
	if err != nil {
		return nil, err
	}
	kept, err := w.Sequential.Drop(x, c.sv)
	if err != nil {
		return nil, err
	}
	if err := w.retrack(c); err != nil {
		return nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	return &swapKept{c: c, kept: kept}, nil
}

// Rebuild is the Sequential's Rebuild of what a Swapping's Drop kept; it
// returns the Swapping's context, its rebuilt tensors tracked again.
func (w *Swapping) Rebuild(kept any) (any, error) {
	const where = "Swapping.Rebuild"
	k, ok := kept.(*swapKept)
	if !ok || k == nil || k.c == nil || k.c.w != w {
		return nil, fmt.Errorf("nn: %s: kept context is %T, want the one this Swapping's Drop returned", where, kept)
	}
	sv, err := w.Sequential.Rebuild(k.kept)
	if err != nil {
		return nil, err
	}
	k.c.sv = sv.(*seqSaved) // Sequential.Rebuild returns its Drop's context
	if err := w.retrack(k.c); err != nil {
		return nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	return k.c, nil
}
