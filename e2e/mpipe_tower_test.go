package e2e_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/pipe/pipetest"
)

// affineTower is a trainable pipe.Tower: a·x + b elementwise, one replica
// per rank.
type affineTower struct {
	a, b   float64
	ga, gb *tensor.Dense // 1-element gradients
	kept   map[int]*tensor.Dense
	fwd    int // Forward calls
}

func newAffineTower() *affineTower {
	return &affineTower{a: 0.75, b: 0.125, ga: tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{0})),
		gb: tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{0})), kept: map[int]*tensor.Dense{}}
}

func (t *affineTower) Forward(m int, in *tensor.Dense) (*tensor.Dense, error) {
	t.fwd++
	t.kept[m] = in
	return pipetest.Like(in, pipetest.MapTo(in.Float64s(), func(_ int, v float64) float64 { return t.a*v + t.b })), nil
}

func (t *affineTower) Backward(m int, dy *tensor.Dense) error {
	x, ok := t.kept[m]
	if !ok {
		return fmt.Errorf("micro %d: no Forward kept", m)
	}
	delete(t.kept, m)
	xs := x.Float64s()
	for i, v := range dy.Float64s() {
		t.ga.Float64s()[0] += v * xs[i]
		t.gb.Float64s()[0] += v
	}
	return nil
}

func (t *affineTower) Grads() []*tensor.Dense { return []*tensor.Dense{t.ga, t.gb} }

func (t *affineTower) step() {
	t.a -= pipetest.LR * t.ga.Float64s()[0]
	t.b -= pipetest.LR * t.gb.Float64s()[0]
	t.ga.Float64s()[0], t.gb.Float64s()[0] = 0, 0
}

// TestMPipeTrainableTower: a trainable tower (pipe.Config.Tower, one
// replica per rank) under mpipe in both ownership modes, and under
// interleaved (the first stage's rank runs the whole tower), trains to a
// sequential run's losses and parameters within 1e-12 (float64; the sum
// of the replicas' gradients adds in another order), in process and over
// TCP: each micro-batch's tower forward runs on its owner, its backward
// there too (the owner backward), and every replica ends each iteration
// with the same parameters. Without owner backward (Config.TowerAtFirst)
// the first stage's rank runs the tower's forward and backward of every
// micro-batch and the owners none.
func TestMPipeTrainableTower(t *testing.T) {
	const iters = 3
	for _, tc := range []struct {
		cfg     ir.Config
		mode    string
		tcp     bool
		atFirst bool // Config.TowerAtFirst: without owner backward
	}{
		{ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}, passes.OwnersMin, false, false},
		{ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}, passes.OwnersFull, false, false},
		{ir.Config{Schedule: "mpipe", Ranks: 4, Virtual: 1, Micro: 8}, passes.OwnersFull, false, false},
		{ir.Config{Schedule: "mpipe", Ranks: 4, Virtual: 2, Micro: 3}, passes.OwnersMin, false, false},
		{ir.Config{Schedule: "interleaved", Ranks: 2, Virtual: 2, Micro: 4}, "", false, false},
		{ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}, passes.OwnersFull, true, false},
		{ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}, passes.OwnersFull, false, true},
		{ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}, passes.OwnersMin, false, true},
		{ir.Config{Schedule: "mpipe", Ranks: 3, Virtual: 2, Micro: 7}, passes.OwnersFull, true, true},
	} {
		name := fmt.Sprintf("%s-P%d-V%d-M%d-%s", tc.cfg.Schedule, tc.cfg.Ranks, tc.cfg.Virtual, tc.cfg.Micro, tc.mode)
		if tc.tcp {
			name += "-tcp"
		}
		if tc.atFirst {
			name += "-at-first"
		}
		t.Run(name, func(t *testing.T) {
			p := lowered(t, tc.cfg, gen.Options{Passes: passes.Options{MpipeOwners: tc.mode}})
			trs := inprocWorld(p.spec.Ranks, 20*time.Second)
			if tc.tcp {
				trs = tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil)
			}
			towers := make([]*affineTower, p.spec.Ranks)
			for r := range towers {
				towers[r] = newAffineTower()
			}
			g, counts := newMPipeRigWith(t, p, trs, func(r int, c *pipe.Config) {
				c.Tower, c.TowerAtFirst = towers[r], tc.atFirst
				step := c.OptStep
				c.OptStep = func() error { towers[r].step(); return step() }
			})
			got := g.train(t, iters, rankFns(p, "interp"))
			ref := tame(newStages(p.spec.Stages))
			refTower := newAffineTower()
			want := sequentialTrainableTower(ref, refTower, p.spec.Micro, iters)
			for it := range want {
				for m := range want[it] {
					if d := math.Abs(got[it][m] - want[it][m]); !(d <= 1e-12) {
						t.Errorf("iteration %d micro %d loss %v, want %v (|diff| %g)", it, m, got[it][m], want[it][m], d)
					}
				}
			}
			for s := range ref {
				if math.Abs(g.stages[s].A-ref[s].A) > 1e-12 || math.Abs(g.stages[s].B-ref[s].B) > 1e-12 {
					t.Errorf("stage %d params: got (%v, %v), want (%v, %v)", s, g.stages[s].A, g.stages[s].B, ref[s].A, ref[s].B)
				}
			}
			for r, tw := range towers {
				if math.Abs(tw.a-refTower.a) > 1e-12 || math.Abs(tw.b-refTower.b) > 1e-12 {
					t.Errorf("rank %d's tower: (%v, %v), want (%v, %v)", r, tw.a, tw.b, refTower.a, refTower.b)
				}
				wantFwd := len(counts[r].inputs)
				if tc.atFirst {
					wantFwd = 0
					if r == p.spec.RankOf[0] {
						wantFwd = iters * p.spec.Micro
					}
				}
				if tw.fwd != wantFwd {
					t.Errorf("rank %d ran the tower's forward %d times (loaded %d inputs); want %d", r, tw.fwd, len(counts[r].inputs), wantFwd)
				}
				if len(tw.kept) != 0 {
					t.Errorf("rank %d's tower keeps %d micro-batches after the iterations", r, len(tw.kept))
				}
			}
		})
	}
}

// sequentialTrainableTower is pipetest.Sequential with a trainable tower
// before the stages.
func sequentialTrainableTower(stages []*affine, tower *affineTower, micro, iters int) [][]float64 {
	var out [][]float64
	for it := range iters {
		d := &data{Iter: it}
		losses := make([]float64, micro)
		for m := range micro {
			x, _ := d.Input(m)
			x, _ = tower.Forward(m, x)
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
			_ = tower.Backward(m, dy)
		}
		for _, st := range stages {
			st.Step()
		}
		tower.step()
		out = append(out, losses)
	}
	return out
}
