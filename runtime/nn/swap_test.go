package nn

import (
	"math"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/swap"
)

var swapTiers = []struct {
	name string
	make func(t *testing.T) *swap.Tier
}{
	{"host", func(*testing.T) *swap.Tier { return swap.NewHost() }},
	{"file", func(t *testing.T) *swap.Tier {
		tr, err := swap.NewFile(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}},
}

// rawBits returns t's values as raw bits (nil for a nil tensor).
func rawBits(t *tensor.Dense) []uint64 {
	if t == nil {
		return nil
	}
	var out []uint64
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

func sameRaw(a, b *tensor.Dense) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	if a == nil {
		return true
	}
	x, y := rawBits(a), rawBits(b)
	if a.Dtype() != b.Dtype() || !a.Shape().Eq(b.Shape()) || len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// snapshot returns copies of the tensors of a saved context and, per
// entry, the first entry holding the same tensor (aliasing).
func snapshot(t *testing.T, sv Swappable) ([]*tensor.Dense, []int) {
	t.Helper()
	ts, err := sv.SavedTensors()
	if err != nil {
		t.Fatal(err)
	}
	cp := make([]*tensor.Dense, len(ts))
	alias := make([]int, len(ts))
	for i, x := range ts {
		alias[i] = i
		for j := range i {
			if x != nil && ts[j] == x {
				alias[i] = j
				break
			}
		}
		if x != nil {
			cp[i] = x.Clone().(*tensor.Dense)
		}
	}
	return cp, alias
}

// TestSwapRoundTrip: a Swapping's context offloaded after the forward, or
// after BackwardInput, comes back bit-identical with its aliasing, and the
// gradients equal those of the same model without swapping, bit for bit,
// for every test architecture (Linear, ReLU, Tanh, GELU, nested
// Sequentials), dtype and tier.
func TestSwapRoundTrip(t *testing.T) {
	for _, a := range archs {
		for _, dt := range dtypes {
			for _, tc := range swapTiers {
				for _, afterI := range []bool{false, true} {
					name := a.name + "/" + dt.String() + "/" + tc.name + "/after-F"
					if afterI {
						name = strings.TrimSuffix(name, "F") + "I"
					}
					t.Run(name, func(t *testing.T) {
						tier := tc.make(t)
						defer func() {
							if err := tier.Close(); err != nil {
								t.Error(err)
							}
						}()
						w := WithSwap(a.build(t, dt, 7), tier)
						w.Name = "stage 1"
						ref := a.build(t, dt, 7)
						rng := NewRand(3)
						x := randMatrix(dt, 4, 5, rng)
						y, saved, err := w.Forward(x)
						if err != nil {
							t.Fatal(err)
						}
						ry, rsaved, err := ref.Forward(x)
						if err != nil {
							t.Fatal(err)
						}
						if !sameRaw(y, ry) {
							t.Fatal("forward outputs differ")
						}
						dy := randMatrix(dt, 4, 3, rng)
						var dx, rdx *tensor.Dense
						if afterI {
							if dx, err = w.BackwardInput(saved, dy); err != nil {
								t.Fatal(err)
							}
							if rdx, err = ref.BackwardInput(rsaved, dy); err != nil {
								t.Fatal(err)
							}
						}
						c := saved.(*swapSaved)
						want, alias := snapshot(t, c.sv)
						tracked := tier.Stats().ResidentBytes
						if tracked <= 0 || tracked != c.bytes {
							t.Errorf("tracked %d bytes, context has %d", tracked, c.bytes)
						}
						h, err := w.Offload(saved)
						if err != nil {
							t.Fatal(err)
						}
						held, _ := c.sv.SavedTensors()
						for i, x := range held {
							if x != nil {
								t.Errorf("entry %d still referenced after Offload", i)
							}
						}
						if err := w.WaitOffload(h); err != nil {
							t.Fatal(err)
						}
						if st := tier.Stats(); st.ResidentBytes != 0 || st.OffloadedBytes != tracked || st.ResidentChunks != 0 {
							t.Errorf("while out: %+v", st)
						}
						back, err := w.Load(h)
						if err != nil {
							t.Fatal(err)
						}
						if back != saved {
							t.Error("Load did not return the saved context")
						}
						got, galias := snapshot(t, c.sv)
						for i := range want {
							if !sameRaw(got[i], want[i]) {
								t.Errorf("entry %d differs after the round trip", i)
							}
							if galias[i] != alias[i] {
								t.Errorf("entry %d: aliasing %d became %d", i, alias[i], galias[i])
							}
						}
						if afterI {
							err = w.BackwardWeight(saved, dy)
							if err == nil {
								err = ref.BackwardWeight(rsaved, dy)
							}
						} else {
							if dx, err = w.Backward(saved, dy); err == nil {
								rdx, err = ref.Backward(rsaved, dy)
							}
						}
						if err != nil {
							t.Fatal(err)
						}
						if !sameRaw(dx, rdx) {
							t.Error("input gradients differ")
						}
						for i, p := range w.Params() {
							if !sameRaw(p.Grad, ref.Params()[i].Grad) {
								t.Errorf("gradient of %s differs", p.Name)
							}
						}
						if st := tier.Stats(); st.ResidentBytes != 0 || st.ResidentChunks != 0 || st.Offloads != 1 || st.Loads != 1 || st.PeakResidentBytes < tracked || st.PeakResidentBytes != st.MaxChunkBytes {
							t.Errorf("after the backward: %+v", st)
						}
					})
				}
			}
		}
	}
}

// opaque is a layer whose saved context is not Swappable.
type opaque struct{}

func (opaque) Forward(x *tensor.Dense) (*tensor.Dense, any, error)          { return x, struct{}{}, nil }
func (opaque) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) { return dy, nil }
func (opaque) BackwardWeight(any, *tensor.Dense) error                      { return nil }
func (opaque) Params() []*Param                                             { return nil }

func wantSwapErr(t *testing.T, what string, err error, part string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), part) {
		t.Errorf("%s: error %v, want one mentioning %q", what, err, part)
	}
}

// TestSwapMisuse: contexts and handles used out of order, or of another
// stage, give errors; a layer without a Swappable context is refused at
// Forward.
func TestSwapMisuse(t *testing.T) {
	dt := tensor.Float64
	tier := swap.NewHost()
	defer tier.Close()
	rng := NewRand(1)
	build := func() *Swapping {
		return WithSwap(NewSequential(newLin(t, 5, 4, dt, rng), Tanh{}, newLin(t, 4, 3, dt, rng)), tier)
	}
	w, other := build(), build()
	x, dy := randMatrix(dt, 2, 5, rng), randMatrix(dt, 2, 3, rng)
	_, saved, err := w.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.Offload(saved)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Offload(saved)
	wantSwapErr(t, "second Offload", err, "swapped out")
	_, err = w.BackwardInput(saved, dy)
	wantSwapErr(t, "BackwardInput while out", err, "swapped out; Load it first")
	_, err = w.Backward(h, dy)
	wantSwapErr(t, "Backward on the handle", err, "got a swap handle")
	_, err = other.Load(h)
	wantSwapErr(t, "Load by another stage", err, "another Swapping")
	_, err = w.Load("handle")
	wantSwapErr(t, "Load(string)", err, "handle is string")
	wantSwapErr(t, "WaitOffload(nil)", w.WaitOffload(nil), "handle is <nil>")
	if _, err := w.Load(h); err != nil {
		t.Fatal(err)
	}
	_, err = w.Load(h)
	wantSwapErr(t, "second Load", err, "already loaded")
	if _, err := w.Backward(saved, dy); err != nil {
		t.Fatal(err)
	}
	_, err = w.Offload(saved)
	wantSwapErr(t, "Offload after BackwardWeight", err, "BackwardWeight already ran")
	_, err = other.BackwardInput(saved, dy)
	wantSwapErr(t, "backward on another stage's context", err, "another Swapping")

	op := WithSwap(NewSequential(opaque{}, Tanh{}), tier)
	_, _, err = op.Forward(x)
	wantSwapErr(t, "Forward with an opaque layer", err, "layer 0 (nn.opaque): its saved context struct {} does not implement nn.Swappable")

	var nilW *Swapping
	_, _, err = nilW.Forward(x)
	wantSwapErr(t, "nil Swapping", err, "nil Swapping")

	// Restoring wrong tensors is refused.
	_, saved, err = w.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	sv := saved.(*swapSaved).sv
	wantSwapErr(t, "SetSavedTensors(too few)", sv.SetSavedTensors(nil), "too few")
	ts, _ := sv.SavedTensors()
	wantSwapErr(t, "SetSavedTensors(too many)", sv.SetSavedTensors(append(ts, nil)), "want")
	bad := append([]*tensor.Dense(nil), ts...)
	bad[0] = randMatrix(dt, 3, 5, rng)
	wantSwapErr(t, "SetSavedTensors(wrong rows)", sv.SetSavedTensors(bad), "want float64 (2, 5)")
	bad[0] = randMatrix(tensor.Float32, 2, 5, rng)
	wantSwapErr(t, "SetSavedTensors(wrong dtype)", sv.SetSavedTensors(bad), "want float64 (2, 5)")
	if _, err := w.Backward(saved, dy); err != nil {
		t.Fatal(err)
	}
	if st := tier.Stats(); st.ResidentChunks != 0 || st.ResidentBytes != 0 {
		t.Errorf("stats at the end: %+v", st)
	}
}

// TestSwapNoTier: without a tier a Swapping computes exactly as its
// Sequential, and Offload/Load hand the context back.
func TestSwapNoTier(t *testing.T) {
	dt := tensor.Float32
	w := WithSwap(archs[2].build(t, dt, 5), nil)
	ref := archs[2].build(t, dt, 5)
	rng := NewRand(9)
	x, dy := randMatrix(dt, 3, 5, rng), randMatrix(dt, 3, 3, rng)
	y, saved, err := w.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	ry, rsaved, err := ref.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.Offload(saved)
	if err != nil || h != saved {
		t.Fatalf("Offload without a tier: %v, %v", h, err)
	}
	if err := w.WaitOffload(h); err != nil {
		t.Fatal(err)
	}
	back, err := w.Load(h)
	if err != nil || back != saved {
		t.Fatalf("Load without a tier: %v, %v", back, err)
	}
	dx, err := w.Backward(back, dy)
	if err != nil {
		t.Fatal(err)
	}
	rdx, err := ref.Backward(rsaved, dy)
	if err != nil {
		t.Fatal(err)
	}
	if !sameRaw(y, ry) || !sameRaw(dx, rdx) {
		t.Error("outputs differ")
	}
	for i, p := range w.Params() {
		if !sameRaw(p.Grad, ref.Params()[i].Grad) {
			t.Errorf("gradient of %s differs", p.Name)
		}
	}
}
