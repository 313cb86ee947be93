// Package nncheckpoint joins runtime/checkpoint to runtime/nn and the
// collectives: a layer's nn.Params as checkpoint Params and back, gorgonia
// tensors as checkpoint Tensors, and a Save barrier over a
// collective.Comm. runtime/checkpoint itself uses only the standard
// library, so that the ppgen command can read checkpoints without a
// tensor library.
package nncheckpoint

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/nn"
)

// NNName is the name FromNN gives the i-th parameter of a layer whose
// Params names it name: "i.name" (a transformer block's linear layers all
// name their parameters "weight" and "bias").
func NNName(i int, name string) string { return strconv.Itoa(i) + "." + name }

// FromNN returns the values of layer's parameters params (a runtime/nn
// layer's Params, in order) as Params named NNName(i, p.Name), sharing
// their memory: encode them before the next optimizer step. Optimizer
// state is the caller's to add (Param.State, Param.Scalars).
func FromNN(layer int, params []*nn.Param) ([]checkpoint.Param, error) {
	out := make([]checkpoint.Param, 0, len(params))
	for i, p := range params {
		if p == nil || p.Value == nil {
			return nil, fmt.Errorf("checkpoint: layer %d parameter %d: nil", layer, i)
		}
		t, err := FromDense(p.Value)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: layer %d parameter %d (%q): %w", layer, i, p.Name, err)
		}
		out = append(out, checkpoint.Param{Layer: layer, Name: NNName(i, p.Name), Value: t})
	}
	return out, nil
}

// ToNN copies the values of layer's parameters in got (as FromNN names
// them; got may hold other layers too) into params, checking that each is
// there with the same shape and dtype.
func ToNN(layer int, params []*nn.Param, got []checkpoint.Param) error {
	byName := map[string]*checkpoint.Param{}
	for i := range got {
		if got[i].Layer == layer {
			byName[got[i].Name] = &got[i]
		}
	}
	for i, p := range params {
		name := NNName(i, p.Name)
		src := byName[name]
		if src == nil {
			return fmt.Errorf("checkpoint: layer %d has no parameter %q", layer, name)
		}
		if err := CopyInto(p.Value, src.Value); err != nil {
			return fmt.Errorf("checkpoint: layer %d parameter %q: %w", layer, name, err)
		}
	}
	return nil
}

// FromDense returns t's elements as a checkpoint.Tensor sharing its memory.
func FromDense(t *tensor.Dense) (checkpoint.Tensor, error) {
	if t.IsScalar() || t.IsMaterializable() || t.IsMasked() {
		return checkpoint.Tensor{}, fmt.Errorf("a scalar, view or masked tensor; want a plain one")
	}
	shape := slices.Clone([]int(t.Shape()))
	switch d := t.Data().(type) {
	case []float32:
		return checkpoint.Tensor{Shape: shape, F32: d}, nil
	case []float64:
		return checkpoint.Tensor{Shape: shape, F64: d}, nil
	}
	return checkpoint.Tensor{}, fmt.Errorf("dtype %v, want float32 or float64", t.Dtype())
}

// CopyInto copies src's elements into dst, which must have its shape and
// dtype; nothing when src is dst's memory.
func CopyInto(dst *tensor.Dense, src checkpoint.Tensor) error {
	d, err := FromDense(dst)
	if err != nil {
		return err
	}
	if d.DType() != src.DType() || !slices.Equal(d.Shape, src.Shape) || d.Len() != src.Len() {
		return fmt.Errorf("saved %v %v, the model's %v %v", src.DType(), src.Shape, d.DType(), d.Shape)
	}
	if d.Len() > 0 && (d.F32 != nil && &d.F32[0] == &src.F32[0] || d.F64 != nil && &d.F64[0] == &src.F64[0]) {
		return nil // src was read into dst (checkpoint.LayersInto)
	}
	copy(d.F32, src.F32)
	copy(d.F64, src.F64)
	return nil
}

// CommBarrier returns a Barrier for SaveOptions over comm, which must span
// every rank that saves (the world): a one-element all-reduce.
func CommBarrier(comm *collective.Comm) func() error {
	return func() error {
		if comm == nil {
			return errors.New("checkpoint: nil *collective.Comm")
		}
		return comm.AllReduce(tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{1})))
	}
}
