package sim

import "github.com/ppgen/ppgen/gen/ir"

// A trainable preprocess (pipe.Config.Tower with owner backward; Cost.PreB
// > 0) makes OPT_STEP a meet of every rank, as the runtime runs it: once
// every rank reached OPT_STEP with its transfers drained, the first
// stage's rank sends each input's gradient to the rank that loaded it
// (one Comm), each rank runs the preprocess's backward of every stage-0
// input it loaded (PreB each; the ranks in parallel, so the one with the
// most loads sets the time), the replicas' gradients are summed across the
// ranks (AllReduceTime), and each rank takes its optimizer step (Opt). All
// ranks start and end it together. Without PreB, OPT_STEP is a local step
// costing Opt.
func init() { declareMeet(ir.OptStep, (*simulator).towerDeps) }

// towerDeps fills OPT_STEP's meet when the cost has a trainable tower.
func (s *simulator) towerDeps() {
	if s.c.PreB <= 0 {
		return
	}
	s.collectiveDeps(ir.OptStep, TowerStepTime(&s.c, s.p))
}

// TowerStepTime is the duration of OPT_STEP in p under c with a trainable
// preprocess (c.PreB > 0; see tower.go): Comm + n·PreB + AllReduceTime +
// Opt, n the most stage-0 input loads of one rank.
func TowerStepTime(c *Cost, p ir.Program) float64 {
	most := 0
	for _, steps := range p.Ranks {
		n := 0
		for _, st := range steps {
			if st.Kind == ir.DataLoad && st.Stage == 0 {
				n++
			}
		}
		most = max(most, n)
	}
	return c.Comm + float64(most)*c.PreB + c.AllReduceTime() + c.Opt
}
