package wire

import (
	"testing"
	"unsafe"

	"gorgonia.org/tensor"
)

// poolElems is a float32 tensor size the pool handles (32 KiB).
const poolElems = 8192

func TestRecvPoolBounds(t *testing.T) {
	const elems = poolElems
	size := int64(elems * 4)
	p := NewRecvPool(3 * size)
	var ts []*tensor.Dense
	for range 5 {
		x, _ := p.Get(Float32, []int{elems})
		ts = append(ts, x)
	}
	for _, x := range ts {
		p.Put(x)
	}
	if _, fresh, free := p.Stats(); fresh != 5 || free != 3*size {
		t.Errorf("after 5 fresh gets and 5 puts with room for 3: fresh %d, free %d bytes; want 5, %d", fresh, free, 3*size)
	}
	// Another shape of the same element count reuses; another dtype does not.
	if x, _ := p.Get(Float32, []int{elems / 2, 2}); !slicesEqualShape(x.Shape(), []int{elems / 2, 2}) {
		t.Errorf("reused tensor has shape %v", x.Shape())
	}
	p.Get(Float64, []int{elems})
	if reused, fresh, free := p.Stats(); reused != 1 || fresh != 6 || free != 2*size {
		t.Errorf("reused %d, fresh %d, free %d; want 1, 6, %d", reused, fresh, free, 2*size)
	}
	// Small and empty tensors are not pooled; a scalar keeps its shape.
	small, _ := p.Get(Float32, []int{16})
	empty, _ := p.Get(Float64, []int{0, 3})
	scalar, _ := p.Get(Float64, nil)
	if len(scalar.Shape()) != 0 || len(empty.Float64s()) != 0 {
		t.Errorf("scalar shape %v, empty tensor with %d elements", scalar.Shape(), len(empty.Float64s()))
	}
	before := p.Lent()
	p.Put(small)
	p.Put(empty)
	if _, fresh, _ := p.Stats(); fresh != 6 || p.Lent() != before {
		t.Errorf("small tensors were tracked: fresh %d, lent %d (was %d)", fresh, p.Lent(), before)
	}
	// The table of lent tensors stays bounded when nothing comes back.
	q := NewRecvPool(size)
	for range MaxLent + 50 {
		q.Get(Float32, []int{elems})
	}
	if q.Lent() > MaxLent {
		t.Errorf("lent table has %d entries, bound %d", q.Lent(), MaxLent)
	}
}

func slicesEqualShape(a tensor.Shape, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTCPRecycleAllocs counts the bytes the process allocates while moving
// 4 MiB tensors: with Recycle the receives reuse a few buffers, without it
// every message allocates its payload (which shows the measure can tell).
// FuzzRecvPool runs a sequence of pool operations read from the input
// (get of one of four sizes and two dtypes, recycle of a held tensor, a
// second recycle of one already back, recycle of a view) and checks the
// pool's promises after each: no two held tensors share memory, a held
// tensor keeps what was written into it, the free arrays stay within the
// bound.
func FuzzRecvPool(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 2, 0, 3})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0}) // recycled twice, then two gets
	f.Add([]byte{0, 4, 1, 0, 2, 0, 0, 4, 3, 0})
	f.Add([]byte{0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		// At most 128 operations: a pool of a few buffers has no state
		// that a longer input reaches and these do not, and a few thousand
		// operations (each step checks every live tensor) read as hung.
		ops = ops[:min(len(ops), 256)]
		const unit = MinPooled / 4 // float32 elements of the smallest pooled array
		p := NewRecvPool(3 * MinPooled * 2)
		type held struct {
			t    *tensor.Dense
			mark byte
		}
		var live []held
		var back []*tensor.Dense // recycled: must be ignored if recycled again
		var mark byte
		// Contents are marked and checked at a stride (and at the last
		// byte): a buffer handed out twice changes at every sampled byte,
		// and overlaps are checked by address below. Every byte of every
		// live tensor after every step made one input cost ~100 MB of reads.
		const stride = 257
		fill := func(x *tensor.Dense, v byte) {
			_, raw := memOf(x)
			for i := 0; i < len(raw); i += stride {
				raw[i] = v
			}
			raw[len(raw)-1] = v
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%4, int(ops[i+1])
			switch op {
			case 0: // get
				dt := uint8(Float32)
				if arg&4 != 0 {
					dt = Float64
				}
				n := unit * (1 + arg%4)
				if dt == Float64 {
					n /= 2
				}
				x, raw := p.Get(dt, []int{n})
				if len(raw) != n*ElemSize(dt) {
					t.Fatalf("get(%d, %d): %d raw bytes", dt, n, len(raw))
				}
				mark++
				fill(x, mark)
				live = append(live, held{x, mark})
			case 1: // recycle a held tensor
				if len(live) > 0 {
					k := arg % len(live)
					p.Put(live[k].t)
					back = append(back, live[k].t)
					live = append(live[:k], live[k+1:]...)
				}
			case 2: // recycle again one already back
				if len(back) > 0 {
					p.Put(back[arg%len(back)])
				}
			case 3: // recycle a view or a shallow copy of a held tensor
				if len(live) > 0 {
					x := live[arg%len(live)].t
					if arg&1 == 0 {
						p.Put(x.ShallowClone())
					} else if v, err := x.Slice(tensor.S(0, 1)); err == nil {
						if d, ok := v.(*tensor.Dense); ok {
							p.Put(d)
						}
					}
				}
			}
			for a := range live {
				pa, ra := memOf(live[a].t)
				for j := 0; j < len(ra); j += stride {
					if ra[j] != live[a].mark || ra[len(ra)-1] != live[a].mark {
						t.Fatalf("op %d: a held tensor lost its contents", i/2)
					}
				}
				for b := a + 1; b < len(live); b++ {
					pb, rb := memOf(live[b].t)
					if pa < pb+uintptr(len(rb)) && pb < pa+uintptr(len(ra)) {
						t.Fatalf("op %d: two held tensors share memory", i/2)
					}
				}
			}
			if _, _, free := p.Stats(); free > p.Limit() || free < 0 {
				t.Fatalf("op %d: %d bytes free, bound %d", i/2, free, p.Limit())
			}
		}
	})
}

// memOf returns the address and raw bytes of x's backing array.
func memOf(x *tensor.Dense) (uintptr, []byte) {
	if x.Dtype() == tensor.Float64 {
		s := x.Float64s()
		return uintptr(unsafe.Pointer(unsafe.SliceData(s))), AsBytes(s)
	}
	s := x.Float32s()
	return uintptr(unsafe.Pointer(unsafe.SliceData(s))), AsBytes(s)
}
