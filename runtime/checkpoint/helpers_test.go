package checkpoint

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// model is a test model of layers layers, each with a weight [3, 4] and a
// bias [4] and Adam-like optimizer state, all values drawn from seed.
func model(layers int, seed uint64) []Param {
	rng := rand.New(rand.NewPCG(seed, 1))
	fill := func(shape ...int) Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		t := Tensor{Shape: shape, F64: make([]float64, n)}
		for i := range t.F64 {
			t.F64[i] = rng.NormFloat64()
		}
		return t
	}
	var out []Param
	for l := range layers {
		for _, name := range []string{"0.weight", "0.bias"} {
			shape := []int{3, 4}
			if name == "0.bias" {
				shape = []int{4}
			}
			out = append(out, Param{Layer: l, Name: name, Value: fill(shape...),
				State:   []NamedTensor{{"m", fill(shape...)}, {"v", fill(shape...)}},
				Scalars: map[string]float64{"t": float64(seed)}})
		}
	}
	return out
}

// ofLayers returns the parameters of layers [lo, hi) of ps.
func ofLayers(ps []Param, lo, hi int) []Param {
	var out []Param
	for _, p := range ps {
		if p.Layer >= lo && p.Layer < hi {
			out = append(out, p)
		}
	}
	return out
}

// plainLayout is P ranks × dp replicas, one stage per rank, stage s
// holding layers bounds[s] to bounds[s+1]-1.
func plainLayout(bounds []int, dp int, fsdp bool) Layout {
	l := Layout{Schedule: "1f1b", Ranks: len(bounds) - 1, DP: dp, Stages: len(bounds) - 1, FSDP: fsdp}
	for s := range l.Stages {
		l.RankOf = append(l.RankOf, s)
		l.Layers = append(l.Layers, [2]int{bounds[s], bounds[s+1]})
	}
	return l
}

// shardsOf returns every world rank's shard of ps under l (world rank =
// pp·DP + dp); with FSDP each pipeline rank's parameters form one group,
// "stage s", split over the DP replicas.
func shardsOf(t testing.TB, ps []Param, l Layout) []*Shard {
	t.Helper()
	dp := max(l.DP, 1)
	out := make([]*Shard, l.World())
	for pp := range l.Ranks {
		layers := l.LayersOf(pp)
		mine := ofLayers(ps, layers[0], layers[len(layers)-1]+1)
		for d := range dp {
			s := &Shard{Blobs: map[string][]byte{"rng": []byte(fmt.Sprintf("rank %d", pp*dp+d))}}
			if l.FSDP {
				f, err := SplitFlat(fmt.Sprintf("stage %d", pp), mine, d, dp)
				if err != nil {
					t.Fatal(err)
				}
				s.Flats = []Flat{f}
			} else {
				s.Params = mine
			}
			out[pp*dp+d] = s
		}
	}
	return out
}

// saveAll saves shards as the ranks of l, one goroutine each.
func saveAll(t testing.TB, dir string, l Layout, step int64, shards []*Shard) {
	t.Helper()
	n := l.World()
	b := newBarrier(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			errs[r] = Save(dir, shards[r], SaveOptions{Rank: r, Step: step, Layout: l, Barrier: b.wait,
				State: map[string]json.RawMessage{"lr": json.RawMessage(`{"step":` + fmt.Sprint(step) + `}`)}})
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// barrier is a reusable barrier of n goroutines.
type barrier struct {
	mu    sync.Mutex
	cond  *sync.Cond
	n     int
	count int
	round int
}

func newBarrier(n int) *barrier {
	b := &barrier{n: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *barrier) wait() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	round := b.round
	if b.count++; b.count == b.n {
		b.count = 0
		b.round++
		b.cond.Broadcast()
		return nil
	}
	for round == b.round {
		b.cond.Wait()
	}
	return nil
}

// equalParams fails unless got and want hold the same parameters, bit for
// bit.
func equalParams(t testing.TB, got, want []Param) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d parameters, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Layer != w.Layer || g.Name != w.Name || !sameTensor(g.Value, w.Value) {
			t.Fatalf("parameter %d: layer %d %q %v, want layer %d %q %v", i, g.Layer, g.Name, g.Value.Shape, w.Layer, w.Name, w.Value.Shape)
		}
		if len(g.State) != len(w.State) {
			t.Fatalf("parameter %d: %d optimizer tensors, want %d", i, len(g.State), len(w.State))
		}
		for j := range g.State {
			if g.State[j].Name != w.State[j].Name || !sameTensor(g.State[j].Tensor, w.State[j].Tensor) {
				t.Fatalf("parameter %d (layer %d %q): optimizer tensor %q differs", i, g.Layer, g.Name, w.State[j].Name)
			}
		}
		if fmt.Sprint(g.Scalars) != fmt.Sprint(w.Scalars) {
			t.Fatalf("parameter %d: scalars %v, want %v", i, g.Scalars, w.Scalars)
		}
	}
}

func sameTensor(a, b Tensor) bool {
	return slices.Equal(a.Shape, b.Shape) && a.DType() == b.DType() &&
		slices.Equal(a.F32, b.F32) && slices.Equal(a.F64, b.F64)
}
