package e2e_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/pipe/pipetest"
	"github.com/ppgen/ppgen/runtime/transport"
)

// countingData is one rank's DataSource: it records which micro-batches'
// inputs the rank loaded.
type countingData struct {
	d      *data
	mu     sync.Mutex
	inputs []int
}

func (c *countingData) Input(m int) (*tensor.Dense, error) {
	c.mu.Lock()
	c.inputs = append(c.inputs, m)
	c.mu.Unlock()
	return c.d.Input(m)
}

func (c *countingData) Target(m int) (*tensor.Dense, error) { return c.d.Target(m) }

// TestMPipeMatchesSequential: mpipe in both ownership modes, without a
// preprocess (T = 0) and with a frozen one (an affine tower run in each
// input load, pipe.WithPreprocess), trains to the losses and parameters of
// a sequential run (float64, exactly), in process and over TCP on
// loopback, and every rank loads exactly the inputs of the micro-batches it
// owns, once per iteration (the first stage's rank also the ones nobody
// owns): micro m < owned on rank m mod P, owned = min(P, M) (min) or M
// (full).
func TestMPipeMatchesSequential(t *testing.T) {
	const iters = 3
	for _, tc := range []struct {
		cfg   ir.Config
		mode  string
		tower bool
		tcp   bool
	}{
		{ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}, passes.OwnersMin, false, false},
		{ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}, passes.OwnersFull, false, false},
		{ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}, passes.OwnersMin, true, false},
		{ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}, passes.OwnersFull, true, false},
		{ir.Config{Schedule: "mpipe", Ranks: 4, Virtual: 1, Micro: 8}, passes.OwnersFull, true, false},
		{ir.Config{Schedule: "mpipe", Ranks: 4, Virtual: 2, Micro: 3}, passes.OwnersMin, true, false},
		{ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}, passes.OwnersFull, true, true},
		{ir.Config{Schedule: "mpipe", Ranks: 2, Virtual: 2, Micro: 4}, passes.OwnersMin, false, true},
	} {
		name := fmt.Sprintf("P%d-V%d-M%d-%s-tower=%v", tc.cfg.Ranks, tc.cfg.Virtual, tc.cfg.Micro, tc.mode, tc.tower)
		if tc.tcp {
			name += "-tcp"
		}
		t.Run(name, func(t *testing.T) {
			p := lowered(t, tc.cfg, gen.Options{Passes: passes.Options{MpipeOwners: tc.mode}})
			owned := min(p.spec.Ranks, p.spec.Micro)
			if tc.mode == passes.OwnersFull {
				owned = p.spec.Micro
			}
			var tower func(*tensor.Dense) *tensor.Dense
			var pre pipe.Preprocess
			if tc.tower {
				tower = frozenTower
				pre = func(_ int, in *tensor.Dense) (*tensor.Dense, error) { return tower(in), nil }
			}
			trs := inprocWorld(p.spec.Ranks, 20*time.Second)
			if tc.tcp {
				trs = tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil)
			}
			g, counts := newMPipeRig(t, p, trs, pre)
			got := g.train(t, iters, rankFns(p, "interp"))
			ref := tame(newStages(p.spec.Stages))
			want := sequentialWithTower(ref, tower, p.spec.Micro, iters)
			for it := range want {
				if !sameFloats(got[it], want[it]) {
					t.Errorf("iteration %d losses:\n got %v\nwant %v", it, got[it], want[it])
				}
			}
			for s := range ref {
				if g.stages[s].A != ref[s].A || g.stages[s].B != ref[s].B {
					t.Errorf("stage %d params: got (%v, %v), want (%v, %v)", s, g.stages[s].A, g.stages[s].B, ref[s].A, ref[s].B)
				}
			}
			for r, c := range counts {
				want := p.spec.Inputs(r)
				if n := len(want); tc.mode == passes.OwnersFull && (n < p.spec.Micro/p.spec.Ranks || n > (p.spec.Micro+p.spec.Ranks-1)/p.spec.Ranks) {
					t.Errorf("rank %d loads %d micro-batches in the full mode, want M/P rounded", r, n)
				}
				for _, m := range want {
					if m < owned && m%p.spec.Ranks != r {
						t.Errorf("rank %d loads micro %d, owned by rank %d", r, m, m%p.spec.Ranks)
					}
				}
				var once []int
				for it := range iters {
					got := c.inputs[min(it*len(want), len(c.inputs)):min((it+1)*len(want), len(c.inputs))]
					got = slices.Clone(got)
					slices.Sort(got)
					if !slices.Equal(got, want) {
						t.Errorf("rank %d iteration %d loaded the inputs of micro-batches %v; want %v (the ones it owns)", r, it, got, want)
					}
					once = append(once, got...)
				}
				if len(c.inputs) != len(once) {
					t.Errorf("rank %d loaded %d inputs in %d iterations; want %d", r, len(c.inputs), iters, len(once))
				}
			}
		})
	}
}

// newMPipeRig is newRig with one counting DataSource per rank, each input
// passed through pre when it is not nil.
func newMPipeRig(t *testing.T, p prog, trs []transport.Transport, pre pipe.Preprocess) (*rig, []*countingData) {
	t.Helper()
	return newMPipeRigWith(t, p, trs, func(_ int, c *pipe.Config) {
		if pre != nil {
			c.Data = pipe.WithPreprocess(c.Data, pre)
		}
	})
}

// newMPipeRigWith is newRig with one counting DataSource per rank and each
// rank's Config passed through set before pipe.New.
func newMPipeRigWith(t *testing.T, p prog, trs []transport.Transport, set func(r int, c *pipe.Config)) (*rig, []*countingData) {
	t.Helper()
	g := &rig{p: p, stages: tame(newStages(p.spec.Stages)), data: &data{}, trs: trs}
	counts := make([]*countingData, p.spec.Ranks)
	for r := range p.spec.Ranks {
		stages := map[int]pipe.Stage{}
		var mine []*affine
		for s, rr := range p.spec.RankOf {
			if rr == r {
				stages[s] = g.stages[s]
				mine = append(mine, g.stages[s])
			}
		}
		counts[r] = &countingData{d: g.data}
		cfg := pipe.Config{
			Rank: r, Spec: p.spec, Stages: stages, Loss: mse{}, Data: counts[r], Transport: trs[r],
			OptStep: func() error {
				for _, s := range mine {
					s.Step()
				}
				return nil
			},
		}
		set(r, &cfg)
		x, err := pipe.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		g.xs = append(g.xs, x)
	}
	t.Cleanup(func() {
		for _, x := range g.xs {
			x.Close()
		}
		var wg sync.WaitGroup
		for _, tr := range trs {
			wg.Go(func() { tr.Close() })
		}
		wg.Wait()
	})
	return g, counts
}

// frozenTower is the test's frozen preprocess: 0.75·x + 0.125, elementwise
// (stateless, so every rank may run it at once).
func frozenTower(x *tensor.Dense) *tensor.Dense {
	return pipetest.Like(x, pipetest.MapTo(x.Float64s(), func(_ int, v float64) float64 { return 0.75*v + 0.125 }))
}

// sequentialWithTower is pipetest.Sequential with each input passed through
// the frozen tower first (nil: none).
func sequentialWithTower(stages []*affine, tower func(*tensor.Dense) *tensor.Dense, micro, iters int) [][]float64 {
	var out [][]float64
	for it := range iters {
		d := &data{Iter: it}
		losses := make([]float64, micro)
		for m := range micro {
			x, _ := d.Input(m)
			if tower != nil {
				x = tower(x)
			}
			saved := make([]any, len(stages))
			for s, st := range stages {
				x, saved[s], _ = st.Forward(x)
			}
			tg, _ := d.Target(m)
			loss, dy, _ := pipetest.MSE{}.Loss(x, tg)
			losses[m] = loss
			for s := len(stages) - 1; s >= 0; s-- {
				dx, _ := stages[s].BackwardInput(saved[s], dy)
				_ = stages[s].BackwardWeight(saved[s], dy)
				dy = dx
			}
		}
		for _, st := range stages {
			st.Step()
		}
		out = append(out, losses)
	}
	return out
}
