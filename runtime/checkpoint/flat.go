package checkpoint

import (
	"fmt"
	"maps"
	"slices"
)

// JoinFlat joins the chunks of one FSDP group (all Of of them, in any
// order) into its members' parameters: values and the optimizer tensors
// every chunk has, unpadded and reshaped; each parameter gets chunk 0's
// scalars.
func JoinFlat(chunks []*Flat) ([]Param, error) {
	if len(chunks) == 0 {
		return nil, fmt.Errorf("checkpoint: joining an FSDP group of no chunks")
	}
	first := chunks[0]
	of := first.Of
	ordered := make([]*Flat, of)
	for _, ch := range chunks {
		if ch.Name != first.Name || ch.Of != of || !sameMembers(ch.Members, first.Members) || ch.Value.DType() != first.Value.DType() {
			return nil, fmt.Errorf("checkpoint: FSDP group %q: chunk %d of %d does not match chunk %d of %d", first.Name, ch.Index, ch.Of, first.Index, of)
		}
		if ch.Index < 0 || ch.Index >= of || ordered[ch.Index] != nil {
			return nil, fmt.Errorf("checkpoint: FSDP group %q: chunk %d twice or out of range", first.Name, ch.Index)
		}
		ordered[ch.Index] = ch
	}
	for i, ch := range ordered {
		if ch == nil {
			return nil, fmt.Errorf("checkpoint: FSDP group %q: chunk %d of %d missing", first.Name, i, of)
		}
	}
	join := func(get func(*Flat) (Tensor, bool)) (Tensor, bool) {
		var all Tensor
		for _, ch := range ordered {
			t, ok := get(ch)
			if !ok {
				return Tensor{}, false
			}
			all.F32 = append(all.F32, t.F32...)
			all.F64 = append(all.F64, t.F64...)
		}
		return all, true
	}
	value, _ := join(func(f *Flat) (Tensor, bool) { return f.Value, true })
	type named struct {
		name string
		t    Tensor
	}
	var states []named
	for _, st := range first.State {
		t, ok := join(func(f *Flat) (Tensor, bool) {
			for _, s := range f.State {
				if s.Name == st.Name {
					return s.Tensor, true
				}
			}
			return Tensor{}, false
		})
		if !ok {
			return nil, fmt.Errorf("checkpoint: FSDP group %q: optimizer tensor %q is missing from a chunk", first.Name, st.Name)
		}
		states = append(states, named{st.Name, t})
	}
	total := 0
	for _, m := range first.Members {
		n, _ := elems(m.Shape)
		total += int(n)
	}
	if total > value.Len() {
		return nil, fmt.Errorf("checkpoint: FSDP group %q: members of %d elements in chunks of %d", first.Name, total, value.Len())
	}
	for _, st := range states {
		if st.t.Len() != value.Len() {
			return nil, fmt.Errorf("checkpoint: FSDP group %q: optimizer tensor %q of %d elements, the values %d", first.Name, st.name, st.t.Len(), value.Len())
		}
	}
	var out []Param
	off := 0
	for _, m := range first.Members {
		n64, _ := elems(m.Shape)
		n := int(n64)
		p := Param{Layer: m.Layer, Name: m.Name, Value: slice(value, off, n, m.Shape), Scalars: maps.Clone(first.Scalars)}
		for _, st := range states {
			p.State = append(p.State, NamedTensor{Name: st.name, Tensor: slice(st.t, off, n, m.Shape)})
		}
		out = append(out, p)
		off += n
	}
	return out, nil
}

// slice copies elements [off, off+n) of t as a tensor of shape.
func slice(t Tensor, off, n int, shape []int) Tensor {
	out := Tensor{Shape: slices.Clone(shape)}
	if t.F64 != nil {
		out.F64 = slices.Clone(t.F64[off : off+n])
	} else {
		out.F32 = slices.Clone(t.F32[off : off+n])
	}
	return out
}

func sameMembers(a, b []Member) bool {
	return slices.EqualFunc(a, b, func(x, y Member) bool {
		return x.Layer == y.Layer && x.Name == y.Name && slices.Equal(x.Shape, y.Shape)
	})
}

// SplitFlat returns chunk index of of of the FSDP group name of params (in
// its flattening order, runtime/nn's FSDP: a stage's Params order): the
// values and the optimizer tensors every parameter has, flattened, padded
// with zeros to of·k elements (k = ⌈L/of⌉), elements [index·k,
// (index+1)·k); the chunk's scalars are the first parameter's.
func SplitFlat(name string, params []Param, index, of int) (Flat, error) {
	if len(params) == 0 {
		return Flat{}, fmt.Errorf("checkpoint: FSDP group %q: no parameters", name)
	}
	if of < 1 || index < 0 || index >= of {
		return Flat{}, fmt.Errorf("checkpoint: FSDP group %q: chunk %d of %d", name, index, of)
	}
	dt := params[0].Value.DType()
	f := Flat{Name: name, Index: index, Of: of, Scalars: maps.Clone(params[0].Scalars)}
	total := 0
	for _, p := range params {
		if p.Value.DType() != dt {
			return Flat{}, fmt.Errorf("checkpoint: FSDP group %q: parameter %q is %v, the first %v", name, p.Name, p.Value.DType(), dt)
		}
		f.Members = append(f.Members, Member{Layer: p.Layer, Name: p.Name, Shape: slices.Clone(p.Value.Shape)})
		total += p.Value.Len()
	}
	k := (total + of - 1) / of
	chunk := func(get func(Param) (Tensor, bool)) (Tensor, bool) {
		t := Tensor{Shape: []int{k}}
		if dt == Float64 {
			t.F64 = make([]float64, 0, k)
		} else {
			t.F32 = make([]float32, 0, k)
		}
		lo, hi := index*k, (index+1)*k
		off := 0
		for _, p := range params {
			v, ok := get(p)
			if !ok {
				return Tensor{}, false
			}
			n := v.Len()
			a, b := max(lo, off), min(hi, off+n)
			if a < b {
				if v.F64 != nil {
					t.F64 = append(t.F64, v.F64[a-off:b-off]...)
				} else {
					t.F32 = append(t.F32, v.F32[a-off:b-off]...)
				}
			}
			off += n
		}
		for t.Len() < k {
			if dt == Float64 {
				t.F64 = append(t.F64, 0)
			} else {
				t.F32 = append(t.F32, 0)
			}
		}
		return t, true
	}
	f.Value, _ = chunk(func(p Param) (Tensor, bool) { return p.Value, true })
	for _, st := range params[0].State {
		t, ok := chunk(func(p Param) (Tensor, bool) {
			for _, s := range p.State {
				if s.Name == st.Name {
					return s.Tensor, true
				}
			}
			return Tensor{}, false
		})
		if !ok {
			return Flat{}, fmt.Errorf("checkpoint: FSDP group %q: a parameter lacks optimizer tensor %q", name, st.Name)
		}
		f.State = append(f.State, NamedTensor{Name: st.Name, Tensor: t})
	}
	return f, nil
}
