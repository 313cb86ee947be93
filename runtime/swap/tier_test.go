package swap_test

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/swap"
)

// tiers are the tiers every table test runs on.
var tiers = []struct {
	name string
	make func(t testing.TB) *swap.Tier
}{
	{"host", func(testing.TB) *swap.Tier { return swap.NewHost() }},
	{"file", func(t testing.TB) *swap.Tier {
		tr, err := swap.NewFile(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}},
}

var dtypes = []tensor.Dtype{tensor.Float32, tensor.Float64}

// special holds values whose bits a lossy copy would change: signed zero,
// infinities, a subnormal and NaNs with payloads.
var special32 = []float32{float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), math.SmallestNonzeroFloat32,
	math.Float32frombits(0x7fc00001), math.Float32frombits(0xffa00005)}
var special64 = []float64{math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64,
	math.Float64frombits(0x7ff8000000000001), math.Float64frombits(0xfff4000000000005)}

// randDense returns a tensor of shape sh with random values, the special
// ones first.
func randDense(dt tensor.Dtype, rng *rand.Rand, sh ...int) *tensor.Dense {
	n := 1
	for _, d := range sh {
		n *= d
	}
	if dt == tensor.Float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		copy(v, special32)
		return tensor.New(tensor.WithShape(sh...), tensor.WithBacking(v))
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	copy(v, special64)
	return tensor.New(tensor.WithShape(sh...), tensor.WithBacking(v))
}

// bits returns a tensor's values as raw bits.
func bits(t *tensor.Dense) []uint64 {
	var out []uint64
	if t.Shape().TotalSize() == 0 {
		return out
	}
	switch d := t.Data().(type) {
	case []float32:
		for _, x := range d[:t.Shape().TotalSize()] {
			out = append(out, uint64(math.Float32bits(x)))
		}
	case []float64:
		for _, x := range d[:t.Shape().TotalSize()] {
			out = append(out, math.Float64bits(x))
		}
	}
	return out
}

func sameBits(a, b []uint64) bool {
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

// TestRoundTrip: what Load returns equals, bit for bit, what was offloaded,
// for every tier and dtype and a range of shapes; a tensor listed twice
// comes back as one tensor, nil entries stay nil, and the accounting sees
// one offload and one load of the distinct bytes.
func TestRoundTrip(t *testing.T) {
	for _, tc := range tiers {
		for _, dt := range dtypes {
			t.Run(tc.name+"/"+dt.String(), func(t *testing.T) {
				tier := tc.make(t)
				rng := rand.New(rand.NewPCG(1, 2))
				a := randDense(dt, rng, 8, 33)
				b := randDense(dt, rng, 7)
				c := randDense(dt, rng, 2, 3, 4)
				empty := randDense(dt, rng, 0, 5)
				parent := randDense(dt, rng, 6, 5)
				view, err := parent.Slice(nil, tensor.S(1, 3)) // a strided view: copied
				if err != nil {
					t.Fatal(err)
				}
				v := view.(*tensor.Dense)
				ts := []*tensor.Dense{a, b, nil, a, c, empty, v}
				want := make([][]uint64, len(ts))
				for i, x := range ts {
					if x != nil {
						if x.RequiresIterator() {
							x = x.Materialize().(*tensor.Dense)
						}
						want[i] = bits(x)
					}
				}
				h, err := tier.Offload(ts, "round trip")
				if err != nil {
					t.Fatal(err)
				}
				if got, want := h.Bytes(), swap.SizeOf([]*tensor.Dense{a, b, c, empty})+int64(6*2*dt.Size()); got != want {
					t.Errorf("Bytes = %d, want %d", got, want)
				}
				if err := tier.Wait(h); err != nil {
					t.Fatal(err)
				}
				if st := tier.Stats(); st.Offloads != 1 || st.OffloadedBytes != h.Bytes() || st.Pending != 0 {
					t.Errorf("after Wait: %+v", st)
				}
				got, err := tier.Load(h)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(ts) {
					t.Fatalf("Load returned %d tensors, want %d", len(got), len(ts))
				}
				for i, x := range ts {
					g := got[i]
					if x == nil {
						if g != nil {
							t.Errorf("entry %d: nil became %v", i, g.Shape())
						}
						continue
					}
					if g == nil || g.Dtype() != dt || !g.Shape().Eq(x.Shape()) {
						t.Fatalf("entry %d: got %v, want %v %v", i, g, dt, x.Shape())
					}
					if !sameBits(bits(g), want[i]) {
						t.Errorf("entry %d: values differ after the round trip", i)
					}
				}
				if got[0] != got[3] {
					t.Error("a tensor listed twice came back as two tensors")
				}
				if got[0] == a {
					t.Error("Load returned the original tensor, not a copy")
				}
				st := tier.Stats()
				if st.Loads != 1 || st.OffloadedBytes != 0 || st.BytesIn != h.Bytes() || st.BytesOut != h.Bytes() {
					t.Errorf("after Load: %+v", st)
				}
				if d := tier.Dir(); d != "" {
					if fs := chunkFiles(t, d); len(fs) != 0 {
						t.Errorf("after Load the tier's directory holds %v, want no chunk files", fs)
					}
				}
				if err := tier.Close(); err != nil {
					t.Fatal(err)
				}
				if d := tier.Dir(); d != "" {
					if _, err := os.Stat(d); !os.IsNotExist(err) {
						t.Errorf("after Close %s still exists (%v)", d, err)
					}
				}
			})
		}
	}
}

// TestConcurrent: many goroutines offloading and loading on one tier get
// their own data back and leave the accounting at zero.
func TestConcurrent(t *testing.T) {
	for _, tc := range tiers {
		t.Run(tc.name, func(t *testing.T) {
			tier := tc.make(t)
			defer tier.Close()
			const workers, rounds = 8, 10
			errs := make(chan error, workers)
			for w := range workers {
				go func() {
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					for range rounds {
						x := randDense(tensor.Float64, rng, 16, 16)
						want := bits(x)
						tier.Track(swap.SizeOf([]*tensor.Dense{x}))
						h, err := tier.Offload([]*tensor.Dense{x}, "")
						if err != nil {
							errs <- err
							return
						}
						got, err := tier.Load(h)
						if err != nil {
							errs <- err
							return
						}
						if !sameBits(bits(got[0]), want) {
							t.Errorf("worker %d: values differ", w)
						}
						tier.Untrack(swap.SizeOf(got))
					}
					errs <- nil
				}()
			}
			for range workers {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			st := tier.Stats()
			if st.Offloads != workers*rounds || st.Loads != workers*rounds || st.ResidentBytes != 0 || st.OffloadedBytes != 0 || st.ResidentChunks != 0 {
				t.Errorf("stats: %+v", st)
			}
			if st.PeakResidentChunks < 1 || st.PeakResidentChunks > workers {
				t.Errorf("peak resident chunks %d, want 1..%d", st.PeakResidentChunks, workers)
			}
		})
	}
}
