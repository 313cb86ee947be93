package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
)

// TestRecomputeMatchesSequential: programs lowered with -recompute full
// (every F keeps only its stage's input, a RECOMPUTE re-runs the forward
// before the chunk's backward) train in process (two also over TCP on
// loopback), through Interpret, to
// exactly the losses and parameters of a sequential run (float64), for
// several families, and every chunk runs its stage's Forward twice. With
// -recompute full:0 only stage 0 does; @idle (RECOMPUTE moved earlier into
// idle time) trains the same; a selective policy on stages that are no
// pipe.Recomputable re-runs them whole (TestRecomputeNNMatchesNone trains
// nn stages, which recompute only their share).
func TestRecomputeMatchesSequential(t *testing.T) {
	const iters = 3
	for _, tc := range []struct {
		cfg    ir.Config
		policy string
		tcp    bool // over TCP on loopback instead of in process
	}{
		{ir.Config{Schedule: "1f1b", Ranks: 3, Micro: 6}, "full", false},
		{ir.Config{Schedule: "gpipe", Ranks: 2, Micro: 4}, "full", false},
		{ir.Config{Schedule: "interleaved", Ranks: 2, Virtual: 2, Micro: 4}, "full", false},
		{ir.Config{Schedule: "zbv", Ranks: 2, Micro: 4}, "full", false},
		{ir.Config{Schedule: "dualpipev", Ranks: 2, Micro: 4}, "full", false},
		{ir.Config{Schedule: "interleaved-zb", Ranks: 2, Virtual: 2, Micro: 4}, "full", false},
		{ir.Config{Schedule: "1f1b", Ranks: 3, Micro: 6}, "full:0", false},
		{ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8}, "full:0@idle", false},
		{ir.Config{Schedule: "interleaved", Ranks: 2, Virtual: 2, Micro: 4}, "full:0,1@idle", false},
		{ir.Config{Schedule: "zbv", Ranks: 2, Micro: 4}, "full", true},
		{ir.Config{Schedule: "1f1b", Ranks: 3, Micro: 6}, "full:0@idle", true},
		// affine stages are no pipe.Recomputable: a selective policy
		// recomputes them whole
		{ir.Config{Schedule: "1f1b", Ranks: 3, Micro: 6}, "selective:0.5", false},
	} {
		name := fmt.Sprintf("%s-P%d-%s", tc.cfg.Schedule, tc.cfg.Ranks, tc.policy)
		if tc.tcp {
			name += "-tcp"
		}
		t.Run(name, func(t *testing.T) {
			opt := gen.Options{Passes: passes.Options{Set: map[string]string{"recompute": tc.policy}}}
			p := lowered(t, tc.cfg, opt)
			if len(p.spec.Recompute) == 0 {
				t.Fatalf("Spec.Recompute is empty")
			}
			trs := inprocWorld(p.spec.Ranks, 20*time.Second)
			if tc.tcp {
				trs = tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil)
			}
			g := newRig(t, p, trs, false)
			got := g.train(t, iters, rankFns(p, "interp"))
			checkAgainstSequential(t, g, got, false)
			on := map[int]bool{}
			for _, s := range p.spec.Recompute {
				on[s] = true
			}
			for s, st := range g.stages {
				chunks := p.spec.Micro / max(p.spec.Copies, 1)
				want := iters * chunks
				if on[s] {
					want *= 2
				}
				if st.FwdCalls != want {
					t.Errorf("stage %d ran Forward %d times in %d iterations; want %d", s, st.FwdCalls, iters, want)
				}
			}
		})
	}
}
