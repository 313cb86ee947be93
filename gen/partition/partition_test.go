package partition

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/internal/long"
)

func build(t *testing.T, name string, P, V, M int) ir.Program {
	t.Helper()
	cfg, fam, err := schedules.Normalize(ir.Config{Schedule: name, Ranks: P, Virtual: V, Micro: M})
	if err != nil {
		t.Fatal(err)
	}
	p, err := fam.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// llm is the LLM-like model of BENCHMARKS.md: an embedding, n blocks, a
// head and loss of 3× a block and 4× its activation.
func llm(n int) model.Model {
	m := model.Model{Layers: []model.Layer{{Name: "embed", F: 0.3, I: 0, W: 0.3, Act: 1}}}
	for i := range n {
		m.Layers = append(m.Layers, model.Layer{Name: fmt.Sprintf("block%d", i), F: 1, I: 1, W: 1, Act: 1, Params: 1})
	}
	return model.Model{Layers: append(m.Layers, model.Layer{Name: "head", F: 3, I: 3, W: 3, Act: 4, Params: 2})}
}

// allSplits lists every split of L layers into n stages.
func allSplits(L, n int) [][]int {
	var out [][]int
	var rec func(b []int)
	rec = func(b []int) {
		if len(b) == n {
			out = append(out, append(slices.Clone(b), L))
			return
		}
		for x := b[len(b)-1] + 1; x <= L-(n-len(b)); x++ {
			rec(append(b, x))
		}
	}
	rec([]int{0})
	return out
}

func TestBalancedByHand(t *testing.T) {
	mk := func(ws ...float64) model.Model {
		var m model.Model
		for _, w := range ws {
			m.Layers = append(m.Layers, model.Layer{F: w})
		}
		return m
	}
	for _, tc := range []struct {
		m    model.Model
		n    int
		want []int
	}{
		{mk(1, 1, 1, 1), 2, []int{0, 2, 4}},
		{mk(3, 1, 1, 1), 2, []int{0, 1, 4}},
		{mk(1, 1, 1, 3), 2, []int{0, 3, 4}},
		{mk(1, 1, 1, 1, 1, 1), 3, []int{0, 2, 4, 6}},
		// The bottleneck is 5 (5 alone); the stages after it must still get
		// a layer each.
		{mk(1, 5, 1, 1), 4, []int{0, 1, 2, 3, 4}},
		{mk(2, 2, 2, 6), 2, []int{0, 3, 4}},
	} {
		got, err := Balanced(tc.m, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Bounds, tc.want) {
			t.Errorf("Balanced(%v, %d) = %v, want %v", tc.m.Layers, tc.n, got.Bounds, tc.want)
		}
	}
}

// TestSearchNeverWorseThanEven on random models and families, and no worse
// than the best split by brute force by more than the local search's reach
// on small ones.
func TestSearchNeverWorseThanEven(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 7))
	fams := []struct {
		name    string
		P, V, M int
	}{{"1f1b", 2, 0, 4}, {"gpipe", 3, 0, 3}, {"zb-h1", 2, 0, 4}, {"interleaved", 2, 2, 4}, {"zbv", 2, 0, 4}, {"dualpipe", 2, 0, 4}}
	for trial := range 6 {
		L := 6 + trial%3
		var m model.Model
		for i := range L {
			m.Layers = append(m.Layers, model.Layer{Name: fmt.Sprint("l", i), F: 0.2 + 2*rng.Float64(), I: 0.2 + 2*rng.Float64(), W: 2 * rng.Float64(), Act: rng.Float64(), Params: rng.Float64()})
		}
		for _, f := range fams {
			p := build(t, f.name, f.P, f.V, f.M)
			n := p.Stages() / Copies(p)
			if n > L {
				continue
			}
			brute := 0.0
			for i, b := range allSplits(L, n) {
				ev, err := Evaluate(m, model.Partition{Bounds: b}, p, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 || ev.Makespan < brute {
					brute = ev.Makespan
				}
			}
			// Small enough for the exact search, and the local search
			// (a budget under the number of splits).
			for _, opt := range []Options{{}, {MaxEvals: 20}} {
				res, err := Search(m, p, opt)
				if err != nil {
					t.Fatal(err)
				}
				if res.Eval.Makespan > res.EvenEval.Makespan*(1+1e-9) {
					t.Errorf("%s: search %g worse than even %g", f.name, res.Eval.Makespan, res.EvenEval.Makespan)
				}
				if res.Eval.Makespan < brute*(1-1e-9) {
					t.Fatalf("%s: search %g below the brute-force optimum %g", f.name, res.Eval.Makespan, brute)
				}
				if opt.MaxEvals == 0 && !near(res.Eval.Makespan, brute) {
					t.Errorf("trial %d %s: exact search %g, brute force %g", trial, f.name, res.Eval.Makespan, brute)
				}
				if opt.MaxEvals > 0 && res.Evals > opt.MaxEvals {
					t.Errorf("%d simulations over the budget %d", res.Evals, opt.MaxEvals)
				}
			}
		}
	}
}

// TestSearchLLM: on the LLM-like model the search moves blocks off the
// head's stage, and beats the even split.
func TestSearchLLM(t *testing.T) {
	m := llm(8)
	p := build(t, "1f1b", 4, 0, 8)
	res, err := Search(m, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	last := res.Split.Bounds[len(res.Split.Bounds)-2]
	evenLast := res.Even.Bounds[len(res.Even.Bounds)-2]
	if len(m.Layers)-last >= len(m.Layers)-evenLast {
		t.Errorf("the head's stage holds %d layers, even %d: %s", len(m.Layers)-last, len(m.Layers)-evenLast, Names(m, res.Split))
	}
	if !(res.Eval.Makespan < res.EvenEval.Makespan) {
		t.Errorf("makespan %g, even %g", res.Eval.Makespan, res.EvenEval.Makespan)
	}
}

// TestSearchMemory: under a limit the chosen split fits; below the least
// memory of every split (brute force) the search refuses, naming a limit
// that then fits.
func TestSearchMemory(t *testing.T) {
	m := llm(4)
	p := build(t, "1f1b", 2, 0, 4)
	L, n := len(m.Layers), p.Stages()
	least := -1.0
	for _, b := range allSplits(L, n) {
		ev, err := Evaluate(m, model.Partition{Bounds: b}, p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if least < 0 || ev.Mem < least {
			least = ev.Mem
		}
	}
	free, err := Search(m, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !(free.Eval.Mem > least) {
		t.Skipf("the fastest split already has the least memory %g", least)
	}
	limit := (least + free.Eval.Mem) / 2
	res, err := Search(m, p, Options{MemLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	if res.Eval.Mem > limit {
		t.Errorf("memory %g over the limit %g", res.Eval.Mem, limit)
	}
	_, err = Search(m, p, Options{MemLimit: least * 0.99})
	var nf *NoFitError
	if !errors.As(err, &nf) {
		t.Fatalf("limit below every split's memory: err %v, want a *NoFitError", err)
	}
	if nf.Least < least*(1-1e-9) {
		t.Errorf("least %g below the brute-force least %g", nf.Least, least)
	}
	if _, err := Search(m, p, Options{MemLimit: nf.Least}); err != nil {
		t.Errorf("the limit the error names does not fit: %v", err)
	}
}

// TestMemoryByHand: 1F1B on 2 ranks, 4 micro-batches: rank 0 holds 2 chunks
// of stage 0 at its peak, rank 1 one of stage 1, whatever the steps cost:
// steps of zero length still hold their chunks. A limit below it fits no
// split.
func TestMemoryByHand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f, i, w float64
	}{
		{"unit costs", 1, 1, 1},
		{"all zero", 0, 0, 0},
		{"free forward", 0, 1, 1},
		{"free backward", 1, 0, 0},
		{"free W", 1, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := model.Model{Layers: []model.Layer{
				{F: tc.f, I: tc.i, W: tc.w, Act: 1, Params: 5},
				{F: tc.f, I: tc.i, W: tc.w, Act: 2, Params: 1},
				{F: tc.f, I: tc.i, W: tc.w, Act: 4, Params: 1},
			}}
			p := build(t, "1f1b", 2, 0, 4)
			ev, err := Evaluate(m, model.Partition{Bounds: []int{0, 1, 3}}, p, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if want := []float64{2*1 + 5, 1*(2+4) + 2}; !slices.Equal(ev.MemPerRank, want) {
				t.Errorf("memory per rank %v, want %v", ev.MemPerRank, want)
			}
			if _, err := Search(m, p, Options{MemLimit: 1}); err == nil {
				t.Errorf("a split fits the limit 1; want none (every split holds more than 1 on some rank)")
			}
		})
	}
}

// TestPlaced: on equal layers every rank gets its even share of the work
// (the split may still differ from the even one, giving the chunks that
// live longest fewer layers); on the LLM-like model zigzagged over P = 8
// (V = 4: stages 0 and 31 both on rank 0) the busiest rank can do no
// better than rank 0 holding the embedding and the head alone in its end
// stages plus one block in each of its two middle ones,
// 0.3 + 0.3 + 9 + 2·3 = 15.6 (the other seven ranks' 28 stages take the
// 30 blocks left, 15 at most each), and Placed reaches it. Every split it
// returns is valid, and the same on every call.
func TestPlaced(t *testing.T) {
	rankWork := func(m model.Model, pl ir.Placement, b []int) float64 {
		work := make([]float64, pl.Ranks())
		for s := range pl.Stages() {
			for _, l := range m.Layers[b[s]:b[s+1]] {
				work[pl.RankOf[s]] += l.F + l.I + l.W
			}
		}
		return slices.Max(work)
	}
	uniform := model.Model{}
	for range 32 {
		uniform.Layers = append(uniform.Layers, model.Layer{F: 1, I: 1, W: 0.5, Act: 1})
	}
	for _, pl := range []ir.Placement{ir.Loop(4, 1), ir.Loop(4, 2), ir.VShape(4), ir.Zigzag(4, 8), ir.Loop(8, 4)} {
		got, err := Placed(uniform, pl)
		if err != nil {
			t.Fatal(err)
		}
		if w, want := rankWork(uniform, pl, got.Bounds), 2.5*32/float64(pl.Ranks()); w != want {
			t.Errorf("uniform on %s: %v, busiest rank %g, want %g", pl, got.Bounds, w, want)
		}
	}
	m := llm(32)
	pl := ir.Zigzag(8, 4)
	got, err := Placed(m, pl)
	if err != nil {
		t.Fatal(err)
	}
	b := got.Bounds
	if b[1] != 1 || b[len(b)-2] != len(m.Layers)-1 {
		t.Errorf("LLM-like on %s: %v; want the embedding and the head each alone", pl, b)
	}
	if w := rankWork(m, pl, b); w > 15.6+1e-9 {
		t.Errorf("LLM-like on %s: %v, busiest rank %g, want 15.6", pl, b, w)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		var m model.Model
		for range 1 + rng.IntN(40) {
			m.Layers = append(m.Layers, model.Layer{F: rng.Float64() * 3, I: rng.Float64() * 3, W: rng.Float64(), Act: rng.Float64() * 4})
		}
		P := 1 + rng.IntN(4)
		pl := ir.Loop(P, 1+rng.IntN(3))
		if rng.IntN(2) == 0 {
			pl = ir.Zigzag(P, 2*(1+rng.IntN(2)))
		}
		got, err := Placed(m, pl)
		if pl.Stages() > len(m.Layers) {
			if err == nil {
				t.Errorf("%d layers on %s: %v, want an error", len(m.Layers), pl, got.Bounds)
			}
			continue
		}
		if err != nil || len(got.Bounds) != pl.Stages()+1 {
			t.Fatalf("%d layers on %s: %v, %v", len(m.Layers), pl, got.Bounds, err)
		}
		again, _ := Placed(m, pl)
		if !slices.Equal(got.Bounds, again.Bounds) {
			t.Errorf("not deterministic: %v then %v", got.Bounds, again.Bounds)
		}
	}
}

// TestPlacedLarge: on thousands of stages Placed still returns a valid
// split, and (long suite only, a wall-clock verdict) stops within its work
// bound: in under 5 seconds.
func TestPlacedLarge(t *testing.T) {
	m := llm(8190) // two layers a stage
	pl := ir.Zigzag(512, 8)
	start := time.Now()
	got, err := Placed(m, pl)
	if err != nil || len(got.Bounds) != pl.Stages()+1 {
		t.Fatalf("%v, %v", len(got.Bounds), err)
	}
	if d := time.Since(start); long.Enabled() && d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestClimb: the moves and their order. With keep accepting any move that
// grows the last stage, a layer leaves the first stage for the last first,
// and the climb ends with every other stage down to one layer; tries
// bounds the moves tried; model.FromCounts and Counts are inverse.
func TestClimb(t *testing.T) {
	for _, tc := range []struct {
		cnt   []int
		tries int
		want  []int
	}{
		{[]int{2, 2}, 1, []int{1, 3}},
		{[]int{3, 2, 2}, 1, []int{2, 2, 3}},
		{[]int{3, 2, 2}, 100, []int{1, 1, 5}},
		{[]int{3, 2, 2}, 0, []int{3, 2, 2}},
		{[]int{1, 1}, 100, []int{1, 1}},
	} {
		cnt := slices.Clone(tc.cnt)
		last := cnt[len(cnt)-1]
		if err := Climb(cnt, tc.tries, func() (bool, error) {
			if cnt[len(cnt)-1] > last {
				last = cnt[len(cnt)-1]
				return true, nil
			}
			return false, nil
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cnt, tc.want) {
			t.Errorf("Climb(%v, %d) = %v, want %v", tc.cnt, tc.tries, cnt, tc.want)
		}
		if got := model.FromCounts(cnt).Counts(); !slices.Equal(got, cnt) {
			t.Errorf("FromCounts(%v).Counts() = %v", cnt, got)
		}
	}
}
