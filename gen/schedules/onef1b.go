package schedules

import "github.com/ppgen/ppgen/gen/ir"

func init() {
	Register(Family{
		Name:           "1f1b",
		Aliases:        []string{"1F1B"}, // PyTorch: Schedule1F1B
		Summary:        "1F1B: warm-up forwards, then one forward and one backward alternating, then the remaining backwards",
		Constraints:    "virtual = 1; any ranks ≥ 1 and micro ≥ 1 (micro < ranks included)",
		DefaultVirtual: 1,
		Build:          build1F1B,
	})
}

// build1F1B returns the order of PyTorch's Schedule1F1B. Rank r holds stage r
// (or the stage s that -placement gives it; r below is then s) and, with
// w = min(M, P-r) warm-up forwards:
//
//   - warm-up: F(r, 0), ..., F(r, w-1);
//   - steady state, for i = 0 .. M-w-1: B(r, i) then F(r, w+i);
//   - cool-down: B(r, M-w), ..., B(r, M-1).
//
// Backwards run in ascending micro-batch order. The last rank thus alternates
// F, B from the start; rank 0 keeps up to P micro-batches live. With M < P the
// early ranks run every forward in the warm-up and the steady state is empty,
// which is still feasible (no rank waits on a step that waits on it).
func build1F1B(cfg ir.Config) (ir.Program, error) {
	return oneStagePerRank("1f1b", cfg, func(s int) int { return min(cfg.Micro, cfg.Ranks-s) })
}
