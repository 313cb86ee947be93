package nn

import (
	"slices"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

func stateParams(dt tensor.Dtype) []*Param {
	return []*Param{vectorParam(dt, "layer 0/weight", []float64{1, -2, 3}), vectorParam(dt, "layer 0/bias", []float64{0.5}), vectorParam(dt, "layer 1/weight", []float64{-1, 4})}
}

func stateGrads(step int) [][]float64 {
	s := float64(step + 1)
	return [][]float64{{0.3 * s, -0.2, 1 / s}, {-0.7 * s}, {0.1, 0.05 * s * s}}
}

func stepAll(t *testing.T, opt Optimizer, ps []*Param, from, to int) {
	t.Helper()
	for k := from; k < to; k++ {
		for i, g := range stateGrads(k) {
			setGrad(ps[i], g)
		}
		if err := opt.Step(ps); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOptimStateRoundTrip: six steps in one go equal three steps, State,
// a fresh optimizer and fresh parameters with SetState, and three more,
// bit for bit, for every optimizer and dtype.
func TestOptimStateRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  func() Optimizer
		kind string
		bufs []string
	}{
		{"sgd", func() Optimizer { return &SGD{LR: 0.1} }, KindSGD, nil},
		{"sgd-momentum", func() Optimizer { return &SGD{LR: 0.1, Momentum: 0.9} }, KindSGD, []string{BufMomentum}},
		{"adam", func() Optimizer { return NewAdam(0.01) }, KindAdam, []string{BufExpAvg, BufExpAvgSq}},
		{"adamw", func() Optimizer { o := NewAdamW(); o.LR = 0.05; return o }, KindAdamW, []string{BufExpAvg, BufExpAvgSq}},
	} {
		for _, dt := range dtypes {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				whole := stateParams(dt)
				stepAll(t, c.opt(), whole, 0, 6)

				first := stateParams(dt)
				opt := c.opt()
				stepAll(t, opt, first, 0, 3)
				st, err := opt.State(first)
				if err != nil {
					t.Fatal(err)
				}
				if st.Kind != c.kind || !slices.Equal(st.Names(), []string{"layer 0/bias", "layer 0/weight", "layer 1/weight"}) {
					t.Fatalf("state kind %q names %q", st.Kind, st.Names())
				}
				for n, ps := range st.Params {
					if got := bufferNames(ps); !slices.Equal(got, sortedCopy(c.bufs)) {
						t.Errorf("%s: buffers %v, want %v", n, got, c.bufs)
					}
					want := 3
					if c.kind == KindSGD {
						want = 0
					}
					if ps.Step != want {
						t.Errorf("%s: step %d, want %d", n, ps.Step, want)
					}
				}
				// The state is a copy: stepping on does not change it.
				if c.bufs != nil {
					buf := st.Params["layer 0/weight"].Buffers[c.bufs[0]]
					saved := f64(buf)
					stepAll(t, opt, first, 3, 4)
					if !slices.Equal(saved, f64(buf)) {
						t.Error("stepping changed an exported state")
					}
				}

				// Fresh parameters at the values of three steps (a
				// throwaway optimizer of the same kind reproduces them).
				resumed := stateParams(dt)
				stepAll(t, c.opt(), resumed, 0, 3)
				opt2 := c.opt()
				if err := opt2.SetState(resumed, st); err != nil {
					t.Fatal(err)
				}
				stepAll(t, opt2, resumed, 3, 6)
				for i := range whole {
					if a, b := f64(whole[i].Value), f64(resumed[i].Value); !slices.Equal(a, b) {
						t.Errorf("%s: resumed %v, uninterrupted %v", whole[i].Name, b, a)
					}
				}
			})
		}
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out
}

func TestOptimStateRejects(t *testing.T) {
	ps := stateParams(tensor.Float64)
	opt := NewAdamW()
	stepAll(t, opt, ps, 0, 1)
	st, err := opt.State(ps)
	if err != nil {
		t.Fatal(err)
	}
	other := stateParams(tensor.Float32)
	dup := stateParams(tensor.Float64)
	dup[1].Name = dup[0].Name
	unnamed := stateParams(tensor.Float64)
	unnamed[2].Name = ""
	wrongStep := OptimState{Kind: KindAdamW, Params: map[string]ParamState{}}
	for n, p := range st.Params {
		p.Step = 0
		wrongStep.Params[n] = p
	}
	oneBuf := OptimState{Kind: KindAdamW, Params: map[string]ParamState{}}
	for n, p := range st.Params {
		oneBuf.Params[n] = ParamState{Step: 1, Buffers: map[string]*tensor.Dense{BufExpAvg: p.Buffers[BufExpAvg]}}
	}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"kind", NewAdam(1e-3).SetState(ps, st), `state is of a "adamw" optimizer, want "adam"`},
		{"missing", opt.SetState(ps[:2], st), `has parameters ["layer 1/weight"] that were not given`},
		{"extra", opt.SetState(append(stateParams(tensor.Float64), vectorParam(tensor.Float64, "layer 2/weight", []float64{1})), st), `lacks parameters ["layer 2/weight"]`},
		{"dtype", opt.SetState(other, st), "is now float32"},
		{"duplicate", opt.SetState(dup, st), `both named "layer 0/weight"`},
		{"unnamed", func() error { _, err := opt.State(unnamed); return err }(), "parameter 2 has no name"},
		{"step", opt.SetState(ps, wrongStep), "step count 0"},
		{"buffer", opt.SetState(ps, oneBuf), `no buffer "exp_avg_sq"`},
		{"sgd-step", (&SGD{LR: 1}).SetState(ps, OptimState{Kind: KindSGD, Params: map[string]ParamState{"layer 0/weight": {Step: 2}, "layer 0/bias": {}, "layer 1/weight": {}}}), "SGD keeps none"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, c.err, c.want)
		}
	}
	// A refused SetState changed nothing: the state is still the saved one.
	again, err := opt.State(ps)
	if err != nil {
		t.Fatal(err)
	}
	for n, p := range again.Params {
		if p.Step != 1 || !slices.Equal(f64(p.Buffers[BufExpAvg]), f64(st.Params[n].Buffers[BufExpAvg])) {
			t.Errorf("%s: state changed by a refused SetState", n)
		}
	}
}

func TestPrefixNames(t *testing.T) {
	l, err := NewLinear(2, 3, tensor.Float64, NewRand(1))
	if err != nil {
		t.Fatal(err)
	}
	seq := NewSequential(l, Tanh{})
	ps := append(seq.Params(), seq.Params()[0]) // a repeated pointer is renamed once
	PrefixNames("layer 7/", ps)
	var names []string
	for _, p := range seq.Params() {
		names = append(names, p.Name)
	}
	if want := []string{"layer 7/0.weight", "layer 7/0.bias"}; !slices.Equal(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
}
