package checkpoint

import (
	"fmt"
	"slices"

	"github.com/ppgen/ppgen/runtime/dtype"
)

// DType is a tensor's element type in a shard: runtime/dtype's, whose
// codes the shard records.
type DType = dtype.Dtype

// The element types a shard holds.
const (
	Float32 = dtype.Float32
	Float64 = dtype.Float64
)

// Limits of the shard format, checked by the encoder and the decoder.
const (
	MaxName  = 1024      // bytes of a name
	MaxDims  = 8         // dimensions of a tensor
	MaxItems = 1 << 20   // parameters, optimizer tensors, scalars or members in one record or shard
	MaxElems = 1 << 40   // elements of one tensor
	MaxLayer = 1<<31 - 1 // largest layer index
	maxBlob  = 1 << 40   // bytes of one blob
)

// Tensor is a dense tensor in row-major order: exactly one of F32 and F64
// holds its elements, as many as Shape's product (a shape of no
// dimensions is one element).
type Tensor struct {
	Shape []int
	F32   []float32
	F64   []float64
}

// DType is the tensor's element type: Float64 when F64 is set, else
// Float32.
func (t Tensor) DType() DType {
	if t.F64 != nil {
		return Float64
	}
	return Float32
}

// Len is the number of elements the tensor holds.
func (t Tensor) Len() int {
	if t.F64 != nil {
		return len(t.F64)
	}
	return len(t.F32)
}

// Bytes is the size of the elements.
func (t Tensor) Bytes() int64 { return int64(t.Len()) * int64(t.DType().Size()) }

// check checks that the tensor's shape is within the limits and matches
// its element count.
func (t Tensor) check() error {
	if t.F32 != nil && t.F64 != nil {
		return fmt.Errorf("both F32 and F64 are set")
	}
	if len(t.Shape) > MaxDims {
		return fmt.Errorf("%d dimensions, over %d", len(t.Shape), MaxDims)
	}
	n, err := elems(t.Shape)
	if err != nil {
		return err
	}
	if int64(t.Len()) != n {
		return fmt.Errorf("shape %v is %d elements but the tensor holds %d", t.Shape, n, t.Len())
	}
	return nil
}

// elems is the product of shape, checked against MaxElems.
func elems(shape []int) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 || int64(d) > MaxElems {
			return 0, fmt.Errorf("dimension %d of shape %v out of range [0, %d]", d, shape, int64(MaxElems))
		}
		if d != 0 && n > MaxElems/int64(d) {
			return 0, fmt.Errorf("shape %v is over %d elements", shape, int64(MaxElems))
		}
		n *= int64(d)
	}
	return n, nil
}

// Clone returns a deep copy.
func (t Tensor) Clone() Tensor {
	return Tensor{Shape: slices.Clone(t.Shape), F32: slices.Clone(t.F32), F64: slices.Clone(t.F64)}
}

// NamedTensor is one optimizer state tensor of a parameter (Adam's "m" and
// "v", SGD's "velocity"), laid out as the parameter's value.
type NamedTensor struct {
	Name   string
	Tensor Tensor
}

// Param is one parameter of one model layer and its optimizer state:
// Layer is the layer's index in the model (Spec.Layers' numbering), Name
// the parameter's name within the layer, unique in it.
type Param struct {
	Layer int
	Name  string
	Value Tensor
	// State holds the optimizer's tensors of the parameter, in a fixed
	// order; Scalars its numbers (Adam's step count "t").
	State   []NamedTensor
	Scalars map[string]float64
}

// Member is one parameter of an FSDP group, in the group's flattening
// order.
type Member struct {
	Layer int
	Name  string
	Shape []int
}

// Flat is one member's chunk of an FSDP-sharded stage (runtime/nn's FSDP):
// the group's parameters (Members, in order) flattened into one vector of
// L elements, padded with zeros to Of·k elements, k = ⌈L/Of⌉; chunk Index
// holds elements [Index·k, (Index+1)·k). Value and every State tensor are
// 1-D chunks of k elements of that layout; Scalars are the chunk's
// optimizer numbers. Name identifies the group: the Of chunks of a group
// share Name, Members and Of.
type Flat struct {
	Name      string
	Members   []Member
	Index, Of int
	Value     Tensor
	State     []NamedTensor
	Scalars   map[string]float64
}

// Shard is what one rank saves: its parameters by layer, its FSDP chunks,
// and opaque per-rank blobs (an RNG's state).
type Shard struct {
	Params []Param
	Flats  []Flat
	Blobs  map[string][]byte
}

// Layers returns the sorted layer indices the shard holds, through its
// parameters and its flats' members.
func (s *Shard) Layers() []int {
	var out []int
	for _, p := range s.Params {
		out = append(out, p.Layer)
	}
	for _, f := range s.Flats {
		for _, m := range f.Members {
			out = append(out, m.Layer)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Check checks the shard against the format's limits: names, shapes,
// unique (layer, name) pairs, optimizer tensors shaped as their parameter.
func (s *Shard) Check() error {
	if len(s.Params) > MaxItems || len(s.Flats) > MaxItems || len(s.Blobs) > MaxItems {
		return fmt.Errorf("over %d parameters, flats or blobs", MaxItems)
	}
	seen := map[[2]string]bool{}
	for i := range s.Params {
		p := &s.Params[i]
		if err := checkParam(p); err != nil {
			return fmt.Errorf("parameter %d (layer %d %q): %w", i, p.Layer, p.Name, err)
		}
		k := [2]string{fmt.Sprint(p.Layer), p.Name}
		if seen[k] {
			return fmt.Errorf("parameter %q of layer %d appears twice", p.Name, p.Layer)
		}
		seen[k] = true
	}
	flats := map[string]bool{}
	for i := range s.Flats {
		f := &s.Flats[i]
		if err := checkFlat(f); err != nil {
			return fmt.Errorf("flat %d (%q): %w", i, f.Name, err)
		}
		if flats[f.Name] {
			return fmt.Errorf("flat %q appears twice", f.Name)
		}
		flats[f.Name] = true
	}
	for name, b := range s.Blobs {
		if err := checkName(name); err != nil {
			return fmt.Errorf("blob: %w", err)
		}
		if int64(len(b)) > maxBlob {
			return fmt.Errorf("blob %q: %d bytes, over %d", name, len(b), int64(maxBlob))
		}
	}
	return nil
}

func checkName(s string) error {
	if len(s) > MaxName {
		return fmt.Errorf("name of %d bytes, over %d", len(s), MaxName)
	}
	return nil
}

func checkLayer(l int) error {
	if l < 0 || l > MaxLayer {
		return fmt.Errorf("layer %d out of range [0, %d]", l, MaxLayer)
	}
	return nil
}

func checkState(value Tensor, state []NamedTensor, scalars map[string]float64) error {
	if len(state) > MaxItems || len(scalars) > MaxItems {
		return fmt.Errorf("over %d optimizer tensors or scalars", MaxItems)
	}
	for _, st := range state {
		if err := checkName(st.Name); err != nil {
			return err
		}
		if err := st.Tensor.check(); err != nil {
			return fmt.Errorf("optimizer tensor %q: %w", st.Name, err)
		}
		if !slices.Equal(st.Tensor.Shape, value.Shape) || st.Tensor.DType() != value.DType() {
			return fmt.Errorf("optimizer tensor %q is %v %v, the value %v %v", st.Name, st.Tensor.DType(), st.Tensor.Shape, value.DType(), value.Shape)
		}
	}
	for name := range scalars {
		if err := checkName(name); err != nil {
			return err
		}
	}
	return nil
}

func checkParam(p *Param) error {
	if err := checkLayer(p.Layer); err != nil {
		return err
	}
	if err := checkName(p.Name); err != nil {
		return err
	}
	if err := p.Value.check(); err != nil {
		return err
	}
	return checkState(p.Value, p.State, p.Scalars)
}

func checkFlat(f *Flat) error {
	if err := checkName(f.Name); err != nil {
		return err
	}
	if len(f.Members) == 0 || len(f.Members) > MaxItems {
		return fmt.Errorf("%d members, want 1 to %d", len(f.Members), MaxItems)
	}
	if f.Of < 1 || f.Of > MaxItems || f.Index < 0 || f.Index >= f.Of {
		return fmt.Errorf("chunk %d of %d", f.Index, f.Of)
	}
	var total int64
	for _, m := range f.Members {
		if err := checkLayer(m.Layer); err != nil {
			return err
		}
		if err := checkName(m.Name); err != nil {
			return err
		}
		if len(m.Shape) > MaxDims {
			return fmt.Errorf("member %q: %d dimensions, over %d", m.Name, len(m.Shape), MaxDims)
		}
		n, err := elems(m.Shape)
		if err != nil {
			return fmt.Errorf("member %q: %w", m.Name, err)
		}
		if total += n; total > MaxElems {
			return fmt.Errorf("members over %d elements", int64(MaxElems))
		}
	}
	k := (total + int64(f.Of) - 1) / int64(f.Of)
	if len(f.Value.Shape) != 1 || int64(f.Value.Shape[0]) != k {
		return fmt.Errorf("value shape %v, want [%d] (chunk %d of %d of %d elements)", f.Value.Shape, k, f.Index, f.Of, total)
	}
	if err := f.Value.check(); err != nil {
		return err
	}
	return checkState(f.Value, f.State, f.Scalars)
}
