package nn

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"gorgonia.org/tensor"
)

// TestBufferReuseBitIdentical: with buffers given back and taken again
// (and poisoned with NaN when given back, as in every test binary), a
// stage's results are bit-identical to those of fresh allocations, with
// several micro-batches in flight in a zero-bubble order (forwards ahead of
// the backwards, input and weight gradients apart, one chunk recomputed),
// on two stages stepping at once on two goroutines that share the pools.
// A buffer given back while a saved context still read it would carry NaN
// into an output, a gradient or a parameter gradient.
func TestBufferReuseBitIdentical(t *testing.T) {
	for _, dt := range dtypes {
		t.Run(dt.String(), func(t *testing.T) {
			noReuse.Store(true)
			want := reuseRun(t, dt)
			noReuse.Store(false)
			got := reuseRun(t, dt)
			if len(got) != len(want) {
				t.Fatalf("%d results; want %d", len(got), len(want))
			}
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("result %d differs with buffer reuse", i)
				}
			}
		})
	}
}

// reuseRun runs two steps of two stages on two goroutines and returns
// every output, input gradient and parameter gradient, in order.
func reuseRun(t *testing.T, dt tensor.Dtype) [][]float64 {
	t.Helper()
	const stages = 2
	res := make([][][]float64, stages)
	errs := make([]error, stages)
	var wg sync.WaitGroup
	for st := range stages {
		wg.Go(func() { res[st], errs[st] = reuseStage(dt, uint64(st+1)) })
	}
	wg.Wait()
	var all [][]float64
	for st := range stages {
		if errs[st] != nil {
			t.Fatalf("stage %d: %v", st, errs[st])
		}
		all = append(all, res[st]...)
	}
	return all
}

// reuseStage builds a stage (a transformer block, an MLP branch with ReLU
// and a Residual around Tanh, and a layer of another package that passes
// its input and gradient on as its results, in the middle and last) and
// runs two steps of 4 micro-batches:
// F0 F1 F2 I0 F3 W0 I2 I1 W2 W1 I3 W3, the third chunk's forward dropped and
// rebuilt before its backward, then an evaluation (forwards whose contexts
// are released), then the fused Backward of each in a second step.
func reuseStage(dt tensor.Dtype, seed uint64) ([][]float64, error) {
	const d, heads, T, rows, micro = 16, 2, 8, 16, 4
	rng := NewRand(seed)
	blk, err := NewTransformerBlock(d, heads, T, 32, dt, rng)
	if err != nil {
		return nil, err
	}
	l1, err := NewLinear(d, 24, dt, rng)
	if err != nil {
		return nil, err
	}
	l2, err := NewLinear(24, d, dt, rng)
	if err != nil {
		return nil, err
	}
	m := NewSequential(blk, l1, passThrough{}, ReLU{}, l2, &Residual{Inner: NewSequential(Tanh{})}, GELU{}, passThrough{})
	// Three runs of recomputed layers, none from layer 0: each run's
	// input is an output the Sequential hands back at the context's end.
	if err := m.Select(0, []int{1, 3, 4, 6}); err != nil {
		return nil, err
	}
	xs, dys := make([]*tensor.Dense, micro), make([]*tensor.Dense, micro)
	for i := range micro {
		xs[i], dys[i] = randMatrix(dt, rows, d, rng), randMatrix(dt, rows, d, rng)
	}
	var out [][]float64
	saved := make([]any, micro)
	fwd := func(i int) error {
		y, s, err := m.Forward(xs[i])
		saved[i] = s
		out = append(out, f64(y))
		return err
	}
	in := func(i int) error {
		dx, err := m.BackwardInput(saved[i], dys[i])
		if err == nil {
			out = append(out, f64(dx))
		}
		return err
	}
	w := func(i int) error { return m.BackwardWeight(saved[i], dys[i]) }
	drop := func(i int) error {
		k, err := m.Drop(xs[i], saved[i])
		if err != nil {
			return err
		}
		// Other chunks run while it is dropped.
		if err := fwd(3); err != nil {
			return err
		}
		saved[i], err = m.Rebuild(k)
		return err
	}
	steps := []func() error{
		func() error { return fwd(0) }, func() error { return fwd(1) }, func() error { return fwd(2) },
		func() error { return in(0) }, func() error { return drop(2) }, func() error { return w(0) },
		func() error { return in(2) }, func() error { return in(1) }, func() error { return w(2) },
		func() error { return w(1) }, func() error { return in(3) }, func() error { return w(3) },
	}
	for i, f := range steps {
		if err := f(); err != nil {
			return nil, fmt.Errorf("step 1, call %d: %w", i, err)
		}
	}
	// An evaluation: forwards whose contexts are released at once, the
	// output read after (as a forward-only program sends it on).
	for i := range micro {
		y, s, err := m.Forward(xs[i])
		if err != nil {
			return nil, err
		}
		if err := m.Release(s); err != nil {
			return nil, fmt.Errorf("evaluation %d: %w", i, err)
		}
		out = append(out, f64(y))
	}
	for i := range micro {
		if err := fwd(i); err != nil {
			return nil, err
		}
	}
	for i := micro - 1; i >= 0; i-- {
		dx, err := m.Backward(saved[i], dys[i])
		if err != nil {
			return nil, fmt.Errorf("step 2, backward %d: %w", i, err)
		}
		out = append(out, f64(dx))
	}
	for _, p := range m.Params() {
		out = append(out, f64(p.Grad))
	}
	return out, nil
}

// TestReleaseErrors: Release takes a context no backward has started on,
// once; a released context takes no backward.
func TestReleaseErrors(t *testing.T) {
	rng := NewRand(3)
	blk, err := NewTransformerBlock(8, 2, 4, 16, tensor.Float64, rng)
	if err != nil {
		t.Fatal(err)
	}
	m := NewSequential(blk, newLin(t, 8, 8, tensor.Float64, rng))
	x, dy := randMatrix(tensor.Float64, 8, 8, rng), randMatrix(tensor.Float64, 8, 8, rng)
	_, s1, err := m.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Release(s1); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Release twice":            m.Release(s1),
		"BackwardInput after it":   func() error { _, err := m.BackwardInput(s1, dy); return err }(),
		"BackwardWeight after it":  m.BackwardWeight(s1, dy),
		"Release of another type":  m.Release(struct{}{}),
		"Release after a backward": func() error { _, s2, _ := m.Forward(x); _, _ = m.BackwardInput(s2, dy); return m.Release(s2) }(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// passThrough is a layer of another package (as far as ownsResults knows)
// that returns what it is given: examples/mlp's wait layer does.
type passThrough struct{}

func (passThrough) Forward(x *tensor.Dense) (*tensor.Dense, any, error)          { return x, nil, nil }
func (passThrough) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) { return dy, nil }
func (passThrough) BackwardWeight(any, *tensor.Dense) error                      { return nil }
func (passThrough) Backward(_ any, dy *tensor.Dense) (*tensor.Dense, error)      { return dy, nil }
func (passThrough) Params() []*Param                                             { return nil }
