package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// TestGatherLossOnEveryRank: a -gather-loss program trains as the
// sequential reference does, bit for bit, and after each iteration every
// rank's Losses holds every micro-batch's loss (LossesGathered), the same
// bits as the rank that computed them; run through the interpreter and
// its keyed form, in process and over TCP.
func TestGatherLossOnEveryRank(t *testing.T) {
	const iters = 3
	for _, tc := range []struct {
		cfg  ir.Config
		mode string
		tcp  bool
	}{
		{ir.Config{Schedule: "1f1b", Ranks: 3, Micro: 6}, "interp", false},
		{ir.Config{Schedule: "zbv", Ranks: 2, Micro: 4}, "keyed", false},
		{ir.Config{Schedule: "interleaved", Ranks: 2, Virtual: 2, Micro: 4}, "interp", false},
		{ir.Config{Schedule: "dualpipev", Ranks: 2, Micro: 4}, "interp", false},
		{ir.Config{Schedule: "1f1b", Ranks: 3, Micro: 6}, "interp", true},
	} {
		name := fmt.Sprintf("%s-P%d-%s", tc.cfg.Schedule, tc.cfg.Ranks, tc.mode)
		if tc.tcp {
			name += "-tcp"
		}
		t.Run(name, func(t *testing.T) {
			opt := gen.Options{Passes: passes.Options{Set: map[string]string{"gather-loss": "on"}}}
			p := lowered(t, tc.cfg, opt)
			trs := inprocWorld(p.spec.Ranks, 20*time.Second)
			if tc.tcp {
				trs = tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil)
			}
			g := newRig(t, p, trs, false)
			fns := rankFns(p, tc.mode)
			lastRank := p.spec.RankOf[p.spec.Stages-1]
			var got [][]float64
			for it := range iters {
				g.data.Iter = it
				if err := pipe.RunAll(g.xs, fns); err != nil {
					t.Fatalf("iteration %d: %v", it, err)
				}
				want := g.xs[lastRank].Losses()
				for r, x := range g.xs {
					if !x.LossesGathered() {
						t.Errorf("iteration %d: rank %d: LossesGathered is false", it, r)
					}
					if l := x.Losses(); !sameFloats(l, want) {
						t.Errorf("iteration %d: rank %d's losses %v; rank %d computed %v", it, r, l, lastRank, want)
					}
				}
				got = append(got, want)
			}
			checkAgainstSequential(t, g, got, false)
		})
	}
}
