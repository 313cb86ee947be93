package schedules

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/ir"
)

func init() {
	Register(Family{
		Name:           "dualpipev",
		Aliases:        []string{"DualPipeV"}, // PyTorch: ScheduleDualPipeV
		Summary:        "DualPipeV (\"cut-in-half\" DualPipe): one model copy on the v placement, F&B overlapped (OVERLAP_F_B) in the steady phase",
		Constraints:    "virtual = 2 on the v placement; any ranks ≥ 1; micro ≥ 2·ranks",
		DefaultVirtual: 2,
		Build:          buildDualPipeV,
	})
}

// buildDualPipeV returns DualPipeV, DualPipe cut in half (dualpipev.py of
// deepseek-ai/DualPipe, PyTorch's ScheduleDualPipeV): one model of 2P stages
// on the v placement, rank r holding the down stage r and the up stage
// 2P-1-r. DualPipe's eight phases (zbDualOrder) run with a pipeline of P
// ranks, depth h = r, near = the down stage, far = the up stage and all M
// micro-batches on both: warm-up forwards of the down stage, F(down)/F(up)
// pairs, I/W/F(up) triples with zero-bubble W's, the steady phase of
// OVERLAP_F_B(F(down), B(up)) and OVERLAP_F_B(F(up), B(down)) pairs, then the
// drain, whose second half splits its backwards into I and deferred W's.
//
// Compute-only, with the overlap costing F&B per composite: every rank idles
// (P-1)(F&B+B-3W) units (the formula in chunk costs; 2(P-1) at F = I = W = 1,
// B = 2, F&B = F+B) and holds at most 2P+1 live chunks, P+1/2 stages' worth.
func buildDualPipeV(cfg ir.Config) (ir.Program, error) {
	const name = "dualpipev"
	p, err := zbVProgram(name, cfg)
	if err != nil {
		return ir.Program{}, err
	}
	ranks, m := cfg.Ranks, cfg.Micro
	if m < 2*ranks {
		return ir.Program{}, &ConstraintError{Schedule: name, Param: "micro", Value: m,
			Want: fmt.Sprintf("M ≥ 2P = %d, at least one micro-batch per stage (try %d)", 2*ranks, 2*ranks)}
	}
	for r := range p.Ranks {
		p.Ranks[r] = zbDualOrder(ranks, r, m, r, 2*ranks-1-r, func(_, k int) int { return k })
	}
	return p, nil
}
