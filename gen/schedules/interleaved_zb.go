package schedules

import (
	"errors"
	"fmt"

	"github.com/ppgen/ppgen/gen/ir"
)

// interleavedZBName is the one zero-bubble family that takes less-memory.
const interleavedZBName = "interleaved-zb"

func init() {
	Register(Family{
		Name:           interleavedZBName,
		Summary:        "interleaved 1F1B with B split into I and W, W's deferred into the bubbles at interleaved's peak memory; option less-memory",
		Constraints:    "as interleaved: any ranks ≥ 1, virtual ≥ 1 and micro ≥ 1",
		DefaultVirtual: 2,
		Build:          buildInterleavedZB,
	})
}

// buildInterleavedZB returns the interleaved family's order (looked up in the
// registry, so that both families always share one definition of the
// interleaved order, its warm-up and the less-memory option) with every B
// replaced by its input-gradient half I, and the weight-gradient halves W
// placed by zbFill. The limit on live chunks is the interleaved order's own
// peak, the largest over its ranks, so the memory bound is interleaved's:
// ranks after the first, which interleaved keeps below that peak, defer W's
// up to it, and every rank runs its W's where interleaved would wait for a
// gradient. This is PyTorch's ScheduleInterleavedZeroBubble idea (I/W split,
// W's deferred to fill bubbles) on Megatron's order for every M.
//
// With V = 1 the interleaved order is 1F1B's and the result is zb-h1's. At
// F = I = W = 1 (B = 2) the bubble is well below interleaved's, e.g. P = 8,
// V = 2, M = 32: makespan 199 (6M+P-1, a 0.035 bubble) against 213.
func buildInterleavedZB(cfg ir.Config) (ir.Program, error) {
	const name = interleavedZBName
	p, err := zbLoopProgram(name, cfg, 0)
	if err != nil {
		return ir.Program{}, err
	}
	fam, err := Lookup("interleaved")
	if err != nil {
		return ir.Program{}, fmt.Errorf("%s builds on the interleaved family: %w", name, err)
	}
	base, err := fam.Build(ir.Config{
		Schedule: "interleaved",
		Ranks:    cfg.Ranks,
		Virtual:  cfg.Virtual,
		Micro:    cfg.Micro,
		Options:  ir.Options{LessMemory: cfg.Options.LessMemory},
	})
	if err != nil {
		var ce *ConstraintError
		if errors.As(err, &ce) {
			c := *ce
			c.Schedule = name
			return ir.Program{}, &c
		}
		return ir.Program{}, fmt.Errorf("%s: the interleaved order: %w", name, err)
	}
	if len(base.Ranks) != cfg.Ranks {
		return ir.Program{}, fmt.Errorf("%s: the interleaved order has %d ranks, want %d", name, len(base.Ranks), cfg.Ranks)
	}
	limit := 0
	skel := make([][]ir.Step, len(base.Ranks))
	for r, steps := range base.Ranks {
		live := 0
		skel[r] = make([]ir.Step, 0, len(steps))
		for _, st := range steps {
			switch st.Kind {
			case ir.Forward:
				live++
				limit = max(limit, live)
				skel[r] = append(skel[r], st)
			case ir.Backward:
				live--
				skel[r] = append(skel[r], ir.Compute(ir.BackwardInput, st.Stage, st.Micro))
			default:
				return ir.Program{}, fmt.Errorf("%s: the interleaved order holds %s on rank %d; want only F and B", name, st, r)
			}
		}
	}
	p.Ranks, err = zbFill(p.Placement, cfg.Micro, skel, limit)
	if err != nil {
		return ir.Program{}, err
	}
	return p, nil
}
