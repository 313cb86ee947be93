package schedules

import "github.com/ppgen/ppgen/gen/ir"

func init() {
	Register(Family{
		Name:           "zb-h2",
		Summary:        "zero bubble ZB-H2 (ZB-2p): more warm-up forwards and deferred W's; no stage-span bubble for M ≥ 2P at twice 1F1B's memory",
		Constraints:    "virtual = 1; any ranks ≥ 1 and micro ≥ 1 (zero stage-span bubble needs micro ≥ 2·ranks)",
		DefaultVirtual: 1,
		Build:          buildZBH2,
	})
}

// buildZBH2 returns ZB-H2 of Qi et al. (arXiv 2401.10241, §2.2). Rank r holds
// stage r and runs w_r = min(M, 2P-1-2r) warm-up forwards: exactly enough to
// keep it busy from its first forward (unit r) until the first input
// gradient reaches it (unit 2P-1-r) when F = I = W = 1. Then I and F
// alternate, then the remaining I's, and zbFill places the W's with a limit
// of 2P-1 live chunks (the paper's (2p-1)·M_B): rank 0 holds 2P-1 chunks
// after its warm-up and runs I, W, F from then on, later ranks defer their
// W's into the gaps the gradient chain leaves, and the last rank ends with a
// tail of W's (the paper's trapezoid).
//
// At F = I = W = 1 with no comm cost every rank is busy without a gap from
// its first to its last step (stage-span bubble 0) when M ≥ 2P; the makespan
// stays 3M+P-1 because rank r cannot start before unit r. With fewer
// micro-batches the warm-up cannot cover the gradient's round trip and gaps
// remain.
func buildZBH2(cfg ir.Config) (ir.Program, error) {
	const name = "zb-h2"
	p, err := zbLoopProgram(name, cfg, 1)
	if err != nil {
		return ir.Program{}, err
	}
	ranks := cfg.Ranks
	skel := zbOneStageSkeleton(ranks, cfg.Micro, func(r int) int { return 2*ranks - 1 - 2*r })
	p.Ranks, err = zbFill(p.Placement, cfg.Micro, skel, 2*ranks-1)
	if err != nil {
		return ir.Program{}, err
	}
	return p, nil
}
