package pipe_test

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// f64 and f32 build tensors of shape dims over v (a scalar for no dims).
func f64(v []float64, dims ...int) *tensor.Dense {
	if len(dims) == 0 {
		return tensor.New(tensor.FromScalar(v[0]))
	}
	return tensor.New(tensor.WithShape(dims...), tensor.WithBacking(v))
}

func f32(v []float32, dims ...int) *tensor.Dense {
	if len(dims) == 0 {
		return tensor.New(tensor.FromScalar(v[0]))
	}
	return tensor.New(tensor.WithShape(dims...), tensor.WithBacking(v))
}

func seq64(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(i)*1.25 - 3
	}
	return v
}

func seq32(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i)*0.5 + 1
	}
	return v
}

// bits returns a tensor's elements as bit patterns (float32s widened as
// their 32 bits), to compare NaNs and signed zeros exactly.
func bits(t *tensor.Dense) []uint64 {
	var out []uint64
	switch t.Dtype() {
	case tensor.Float32:
		for _, v := range t.Float32s() {
			out = append(out, uint64(math.Float32bits(v)))
		}
	default:
		for _, v := range t.Float64s() {
			out = append(out, math.Float64bits(v))
		}
	}
	return out
}

// sameSet fails unless got equals want part by part: nil where nil, the
// same dtype, shape and element bits.
func sameSet(t *testing.T, got, want []*tensor.Dense) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d parts, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if (g == nil) != (w == nil) {
			t.Fatalf("part %d: got %v, want %v", i, g, w)
		}
		if w == nil {
			continue
		}
		if g.Dtype() != w.Dtype() || !g.Shape().Eq(w.Shape()) || len(g.Shape()) != len(w.Shape()) {
			t.Fatalf("part %d: %v %v, want %v %v", i, g.Dtype(), g.Shape(), w.Dtype(), w.Shape())
		}
		gb, wb := bits(g), bits(w)
		n := w.Shape().TotalSize()
		if len(w.Shape()) > 0 && w.Shape().TotalSize() == 0 {
			n = 0
		}
		if len(gb) < n || len(wb) < n {
			t.Fatalf("part %d: %d and %d elements, want %d", i, len(gb), len(wb), n)
		}
		for k := range n {
			if gb[k] != wb[k] {
				t.Fatalf("part %d element %d: bits %#x, want %#x", i, k, gb[k], wb[k])
			}
		}
	}
}

// TestPackUnpack round-trips sets by hand: mixed dtypes, scalars, empty
// parts, nil parts, odd float32 counts (padding), the bounds.
func TestPackUnpack(t *testing.T) {
	nan32 := math.Float32frombits(0x7fa00001) // a signalling NaN payload
	nan64 := math.Float64frombits(0x7ff4000000000001)
	maxRank := ones(pipe.MaxPartDims)
	many := make([]*tensor.Dense, pipe.MaxParts)
	for i := range many {
		many[i] = f64([]float64{float64(i)})
	}
	for _, tc := range []struct {
		name string
		set  []*tensor.Dense
	}{
		{"empty set", []*tensor.Dense{}},
		{"hidden and mask", []*tensor.Dense{f64(seq64(12), 3, 4), f32(seq32(3), 3)}},
		{"scalars", []*tensor.Dense{f32([]float32{2.5}), f64([]float64{-7})}},
		{"odd float32 counts", []*tensor.Dense{f32(seq32(1), 1), f32(seq32(5), 5), f32(seq32(3), 1, 3), f64(seq64(2), 2)}},
		{"zero elements", []*tensor.Dense{f64([]float64{}, 0), f32([]float32{}, 3, 0), f64(seq64(2), 2)}},
		{"nil parts", []*tensor.Dense{nil, f64(seq64(4), 2, 2), nil}},
		{"NaN payloads and signed zeros", []*tensor.Dense{f32([]float32{nan32, float32(math.Copysign(0, -1)), 1}, 3), f64([]float64{nan64, math.Copysign(0, -1)}, 2)}},
		{"max rank", []*tensor.Dense{f64([]float64{4}, maxRank...)}},
		{"max parts", many},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := pipe.Pack(tc.set)
			if err != nil {
				t.Fatal(err)
			}
			if c.Dtype() != tensor.Float64 || c.Dims() != 1 {
				t.Fatalf("carrier is %v %v, want 1-D float64", c.Dtype(), c.Shape())
			}
			got, err := pipe.Unpack(c)
			if err != nil {
				t.Fatal(err)
			}
			sameSet(t, got, tc.set)
			for i := range got {
				if got[i] != nil && got[i] == tc.set[i] {
					t.Fatalf("part %d is the packed tensor itself; want a copy", i)
				}
			}
		})
	}
}

// TestPackLayout checks the carrier's words against the layout
// docs/internals.md describes, written out by hand.
func TestPackLayout(t *testing.T) {
	c, err := pipe.Pack([]*tensor.Dense{f64([]float64{1.5, -2}, 2, 1), nil, f32([]float32{1, 2, 3}, 3)})
	if err != nil {
		t.Fatal(err)
	}
	w := c.Float64s()
	pair := func(a, b float32) float64 {
		var buf [8]byte
		binary.NativeEndian.PutUint32(buf[:4], math.Float32bits(a))
		binary.NativeEndian.PutUint32(buf[4:], math.Float32bits(b))
		return math.Float64frombits(binary.NativeEndian.Uint64(buf[:]))
	}
	want := []float64{0x70706d73, 1, 3, 2, 2, 2, 1, 0, 0, 1, 1, 3, 1.5, -2, pair(1, 2), pair(3, 0)}
	if len(w) != len(want) {
		t.Fatalf("carrier %v, want %v", w, want)
	}
	for i := range want {
		if math.Float64bits(w[i]) != math.Float64bits(want[i]) {
			t.Fatalf("word %d is %v, want %v (carrier %v)", i, w[i], want[i], w)
		}
	}
}

// TestPackView: a transposed view is packed in its logical layout.
func TestPackView(t *testing.T) {
	x := f64(seq64(6), 2, 3)
	if err := x.T(); err != nil {
		t.Fatal(err)
	}
	c, err := pipe.Pack([]*tensor.Dense{x})
	if err != nil {
		t.Fatal(err)
	}
	got, err := pipe.Unpack(c)
	if err != nil {
		t.Fatal(err)
	}
	v := seq64(6)
	want := f64([]float64{v[0], v[3], v[1], v[4], v[2], v[5]}, 3, 2)
	sameSet(t, got, []*tensor.Dense{want})
}

// TestPackUnpackRandom is the round-trip property on random sets.
func TestPackUnpackRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		set := make([]*tensor.Dense, rng.IntN(7))
		for i := range set {
			if rng.IntN(6) == 0 {
				continue // nil
			}
			dims := make([]int, rng.IntN(4))
			n := 1
			for j := range dims {
				dims[j] = rng.IntN(5)
				n *= dims[j]
			}
			if rng.IntN(2) == 0 {
				v := make([]float32, n)
				for k := range v {
					v[k] = math.Float32frombits(rng.Uint32())
				}
				set[i] = f32(v, dims...)
			} else {
				v := make([]float64, n)
				for k := range v {
					v[k] = math.Float64frombits(rng.Uint64())
				}
				set[i] = f64(v, dims...)
			}
		}
		c, err := pipe.Pack(set)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		got, err := pipe.Unpack(c)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		sameSet(t, got, set)
	}
}

// ones is n dims of 1.
func ones(n int) []int {
	d := make([]int, n)
	for i := range d {
		d[i] = 1
	}
	return d
}

func TestPackErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []*tensor.Dense
		want string
	}{
		{"too many parts", make([]*tensor.Dense, pipe.MaxParts+1), "at most 256"},
		{"int dtype", []*tensor.Dense{tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{1, 2}))}, "tensor 0 has dtype int"},
		{"too many dims", []*tensor.Dense{nil, f64([]float64{1}, ones(pipe.MaxPartDims+1)...)}, "tensor 1: tensor has 17 dimensions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := pipe.Pack(tc.set); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Pack: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestUnpackCorrupt: each corruption of a valid carrier fails, naming the
// field.
func TestUnpackCorrupt(t *testing.T) {
	// The valid carrier: [f64 (2,1)] [f32 (3)]: header words 0..9, data 10..13.
	valid := func() []float64 {
		c, err := pipe.Pack([]*tensor.Dense{f64([]float64{1.5, -2}, 2, 1), f32([]float32{1, 2, 3}, 3)})
		if err != nil {
			t.Fatal(err)
		}
		return append([]float64(nil), c.Float64s()...)
	}
	set := func(k int, v float64) func([]float64) []float64 {
		return func(w []float64) []float64 { w[k] = v; return w }
	}
	for _, tc := range []struct {
		name  string
		edit  func([]float64) []float64
		field string
	}{
		{"no words", func([]float64) []float64 { return []float64{} }, "magic"},
		{"magic", set(0, 12345), "magic"},
		{"version", set(1, 2), "version"},
		{"count negative", set(2, -1), "count"},
		{"count fraction", set(2, 1.5), "count"},
		{"count NaN", set(2, math.NaN()), "count"},
		{"count Inf", set(2, math.Inf(1)), "count"},
		{"count too large", set(2, pipe.MaxParts+1), "count"},
		{"count beyond the words", set(2, 200), "part 2"},
		{"kind", set(3, 3), "part 0 kind"},
		{"rank", set(4, pipe.MaxPartDims+1), "part 0 rank"},
		{"none with rank", set(3, 0), "part 0 rank"},
		{"dim negative", set(5, -2), "part 0 dim 0"},
		{"dim huge", set(5, 1e20), "part 0 dim 0"},
		{"product overflow", func(w []float64) []float64 {
			// part 0 becomes rank 2 of (2^30, 2^30): 2^60 elements.
			w[5], w[6] = 1<<30, 1<<30
			return w
		}, "part 0 shape"},
		{"data short", set(9, 5), "part 1 data"},
		{"data missing", func(w []float64) []float64 { return w[:len(w)-1] }, "part 1 data"},
		{"trailing word", func(w []float64) []float64 { return append(w, 0) }, "length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.edit(valid())
			_, err := pipe.Unpack(tensor.New(tensor.WithShape(len(w)), tensor.WithBacking(w)))
			var me *pipe.MultiError
			if !errors.As(err, &me) || !strings.HasPrefix(me.Field, tc.field) {
				t.Fatalf("Unpack: %v; want a *MultiError on field %q", err, tc.field)
			}
		})
	}
	for name, c := range map[string]*tensor.Dense{
		"nil":     nil,
		"float32": f32([]float32{1, 2}, 2),
		"2-D":     f64(seq64(4), 2, 2),
	} {
		t.Run(name, func(t *testing.T) {
			var me *pipe.MultiError
			if _, err := pipe.Unpack(c); !errors.As(err, &me) || me.Field != "carrier" {
				t.Fatalf("Unpack: %v; want a *MultiError on the carrier", err)
			}
		})
	}
	t.Run("not a carrier", func(t *testing.T) {
		if _, err := pipe.Unpack(f64(seq64(4), 4)); !errors.Is(err, pipe.ErrNotCarrier) {
			t.Fatalf("Unpack of a plain tensor: %v; want ErrNotCarrier", err)
		}
	})
}

// carrierBytes is a carrier's words as little-endian bytes (the fuzz
// input's encoding).
func carrierBytes(w []float64) []byte {
	b := make([]byte, 8*len(w))
	for i, v := range w {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	return b
}

// FuzzUnpack feeds Unpack carriers (the input's 8-byte little-endian
// words): it must not panic, and what it accepts must round-trip.
func FuzzUnpack(f *testing.F) {
	for _, set := range [][]*tensor.Dense{
		{},
		{f64(seq64(6), 2, 3), f32(seq32(2), 2)},
		{nil, f32([]float32{1}), f64([]float64{}, 0, 4)},
	} {
		c, err := pipe.Pack(set)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(carrierBytes(c.Float64s()))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<16 {
			return
		}
		w := make([]float64, len(b)/8)
		for i := range w {
			w[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
		set, err := pipe.Unpack(tensor.New(tensor.WithShape(len(w)), tensor.WithBacking(w)))
		if err != nil {
			var me *pipe.MultiError
			if !errors.As(err, &me) {
				t.Fatalf("error %v is not a *MultiError", err)
			}
			return
		}
		c, err := pipe.Pack(set)
		if err != nil {
			t.Fatalf("Unpack accepted a set that Pack refuses: %v", err)
		}
		again, err := pipe.Unpack(c)
		if err != nil {
			t.Fatal(err)
		}
		sameSet(t, again, set)
	})
}

// BenchmarkMultiCodec packs and unpacks a transformer boundary: a 64x512
// float32 hidden state and a 64-element float32 mask; copy is the floor,
// allocating and copying the same bytes as two plain slices.
func BenchmarkMultiCodec(b *testing.B) {
	set := []*tensor.Dense{f32(seq32(64*512), 64, 512), f32(seq32(64), 64)}
	c, err := pipe.Pack(set)
	if err != nil {
		b.Fatal(err)
	}
	bytes := int64(4 * (64*512 + 64))
	b.Run("pack", func(b *testing.B) {
		b.SetBytes(bytes)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := pipe.Pack(set); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(bytes)
		b.ReportAllocs()
		for b.Loop() {
			h, m := make([]float32, 64*512), make([]float32, 64)
			copy(h, set[0].Float32s())
			copy(m, set[1].Float32s())
		}
	})
	b.Run("unpack", func(b *testing.B) {
		b.SetBytes(bytes)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := pipe.Unpack(c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
