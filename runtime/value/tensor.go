package value

import (
	"fmt"

	"github.com/ppgen/ppgen/runtime/internal/wire"
	"gorgonia.org/tensor"
)

// Tensor is the default adapter: a gorgonia *tensor.Dense as a Value. Its
// bytes are the tensor's backing array (runtime/internal/wire's PayloadOf, which
// materializes a view or a transpose first: then they are a copy's).
type Tensor struct {
	b wire.Payload
}

// FromDense returns t as a Value: without a copy when t is contiguous, a
// materialized copy when it is a view or a transpose. t must be float32 or
// float64 with at most MaxDims dimensions.
func FromDense(t *tensor.Dense) (*Tensor, error) {
	b, err := wire.PayloadOf(t)
	if err != nil {
		return nil, fmt.Errorf("value.FromDense: %w", err)
	}
	if _, err := Size(Dtype(b.Dtype), b.Dims); err != nil {
		return nil, fmt.Errorf("value.FromDense: %w", err)
	}
	return &Tensor{b}, nil
}

// Dense returns the tensor whose bytes v holds (t itself, or its
// materialized copy).
func (v *Tensor) Dense() *tensor.Dense { return v.b.Keep }

// Dtype returns Float32 or Float64.
func (v *Tensor) Dtype() Dtype { return Dtype(v.b.Dtype) }

// Shape returns the tensor's shape.
func (v *Tensor) Shape() []int { return v.b.Dims }

// Bytes returns the tensor's backing array as bytes (aliasing it).
func (v *Tensor) Bytes() []byte { return v.b.Raw }

// ToDense returns v as a *tensor.Dense: the tensor itself for a *Tensor;
// else, after checking v's layout (Parts), a tensor over v's bytes without
// a copy when they are aligned for the element type (writes into the tensor
// then change v, where v's Bytes alias its storage), or a new tensor
// (wire.Alloc) with the bytes copied in.
func ToDense(v Value) (*tensor.Dense, error) {
	if t, ok := v.(*Tensor); ok && t != nil && t.b.Keep != nil {
		return t.b.Keep, nil
	}
	dt, shape, b, err := Parts(v)
	if err != nil {
		return nil, fmt.Errorf("value.ToDense: %w", err)
	}
	if t := viewDense(dt, shape, b); t != nil {
		return t, nil
	}
	t, buf := wire.Alloc(uint8(dt), shape)
	copy(buf, b)
	return t, nil
}

// AliasDense returns a tensor whose storage is v's: the tensor itself for a
// *Tensor, else a tensor over v's bytes. It fails where no tensor can share
// v's storage: v's Bytes are a copy (Aliased), misaligned, empty, or of a
// value without dimensions.
func AliasDense(v Value) (*tensor.Dense, error) {
	if t, ok := v.(*Tensor); ok && t != nil && t.b.Keep != nil {
		return t.b.Keep, nil
	}
	if v != nil && !IsAliased(v) {
		return nil, fmt.Errorf("value.AliasDense: %T's bytes are a copy of its storage (a strided view?); want a contiguous value", v)
	}
	dt, shape, b, err := Parts(v)
	if err != nil {
		return nil, fmt.Errorf("value.AliasDense: %w", err)
	}
	t := viewDense(dt, shape, b)
	if t == nil {
		return nil, fmt.Errorf("value.AliasDense: %T (%v %v): no tensor can share its storage (empty, no dimensions, or not aligned for %v)", v, dt, shape, dt)
	}
	return t, nil
}

// viewDense returns a tensor of dt and shape over b (checked by Parts), or
// nil when b is empty, misaligned, or shape has no dimensions (a scalar
// tensor holds its element itself).
func viewDense(dt Dtype, shape []int, b []byte) *tensor.Dense {
	if len(shape) == 0 {
		return nil
	}
	dims := append([]int(nil), shape...)
	switch dt {
	case Float32:
		if s, ok := wire.Elems[float32](b); ok {
			return tensor.New(tensor.WithShape(dims...), tensor.WithBacking(s))
		}
	case Float64:
		if s, ok := wire.Elems[float64](b); ok {
			return tensor.New(tensor.WithShape(dims...), tensor.WithBacking(s))
		}
	}
	return nil
}

// Tensors is the Maker of *Tensor values (wire.Alloc); it views
// aligned bytes without a copy.
type Tensors struct{}

// Make returns a new zero tensor of dt and shape as a Value, and its bytes.
func (Tensors) Make(dt Dtype, shape []int) (Value, []byte, error) {
	if _, err := Size(dt, shape); err != nil {
		return nil, nil, err
	}
	t, buf := wire.Alloc(uint8(dt), append([]int(nil), shape...))
	v, err := FromDense(t)
	return v, buf, err
}

// View returns a tensor over buf as a Value, or false (Viewer).
func (Tensors) View(dt Dtype, shape []int, buf []byte) (Value, bool) {
	if n, err := Size(dt, shape); err != nil || n != len(buf) {
		return nil, false
	}
	t := viewDense(dt, shape, buf)
	if t == nil {
		return nil, false
	}
	v, err := FromDense(t)
	return v, err == nil
}
