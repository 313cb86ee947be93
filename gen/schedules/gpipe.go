package schedules

import "github.com/ppgen/ppgen/gen/ir"

func init() {
	Register(Family{
		Name:           "gpipe",
		Aliases:        []string{"GPipe"}, // PyTorch: ScheduleGPipe
		Summary:        "GPipe: every rank runs all forwards, then all backwards (fill-drain)",
		Constraints:    "virtual = 1; any ranks ≥ 1 and micro ≥ 1",
		DefaultVirtual: 1,
		Build:          buildGPipe,
	})
}

// buildGPipe returns the GPipe order of PyTorch's ScheduleGPipe: rank r holds
// stage r (or the stage -placement gives it) and runs F(r, 0), F(r, 1), ..., F(r, M-1), then B(r, 0), B(r, 1),
// ..., B(r, M-1), both in ascending micro-batch order. Every rank keeps all M
// micro-batches' activations live at the turn.
func buildGPipe(cfg ir.Config) (ir.Program, error) {
	return oneStagePerRank("gpipe", cfg, func(int) int { return cfg.Micro })
}
