package passes

import "github.com/ppgen/ppgen/gen/ir"

// Overlap pairs backwards with forwards into OVERLAP_B_F steps, the
// "overlap" option of interleaved 1F1B (docs/design.md §4, §5): on every rank, each
// backward (B or I) immediately followed by a forward F becomes the composite
// (B; F)OVERLAP_B_F, scanning from the front, so the steady state
// F, B, F, B, ... of 1F1B-style orders turns into
//
//	F₁, (B₁; F₂), (B₂; F₃), ..., (Bₙ₋₁; Fₙ), Bₙ
//
// (warm-up forwards and cool-down backwards stay alone). The two sub-steps
// always belong to different micro-batches and neither needs the other: a
// backward of micro-batch m follows every forward of m in a feasible order,
// and a forward needs no backward. A pair whose forward waits longer for its
// input than the backward does starts when both inputs are there; an
// ideal-timed lowering keeps that timeline (see gen/sim: the composite takes
// max(a, b) + Overlap·min(a, b)).
//
// Steps that already are overlaps, W steps and everything else are kept.
// Orders without such adjacent pairs (GPipe, or a tiny M) come back
// unchanged. The input is not modified.
func Overlap(p ir.Program) (ir.Program, error) {
	if err := checkSteps(p, "overlap", false); err != nil {
		return ir.Program{}, err
	}
	return mergePairs(p, func(steps []ir.Step, i int) (ir.Step, bool) {
		if !steps[i].Kind.IsBackward() || i+1 >= len(steps) || steps[i+1].Kind != ir.Forward {
			return ir.Step{}, false
		}
		return ir.Overlap(ir.OverlapBF, steps[i], steps[i+1]), true
	}), nil
}

// mergePairs returns p with every step that pair merges with the step after
// it (pair(steps, i) returning the merged step and true) replaced by the
// merged step, the one after it dropped, on every rank. A rank without such
// a pair keeps p's slice; the others are new: the input is not modified.
func mergePairs(p ir.Program, pair func(steps []ir.Step, i int) (ir.Step, bool)) ir.Program {
	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies, Ranks: make([][]ir.Step, len(p.Ranks))}
	for r, steps := range p.Ranks {
		var out []ir.Step
		for i := 0; i < len(steps); i++ {
			merged, ok := pair(steps, i)
			if !ok {
				if out != nil {
					out = append(out, steps[i])
				}
				continue
			}
			if out == nil {
				out = make([]ir.Step, i, len(steps))
				copy(out, steps[:i])
			}
			out = append(out, merged)
			i++ // the second of the pair is in merged
		}
		if out == nil {
			out = steps
		}
		q.Ranks[r] = out
	}
	return q
}

// DxDwInOverlap splits the full backward inside every overlap step of p into
// dx then dw, the way hyper-parallel runs an OVERLAP_B_F with
// enable_dxdw_split: the backward sub-step B(s, m) becomes I(s, m) and
// W(s, m) goes right after the composite:
//
//	(B(s, m); F(s', m'))OVERLAP_B_F  ->  (I(s, m); F(s', m'))OVERLAP_B_F  W(s, m)
//	(F(s', m'); B(s, m))OVERLAP_F_B  ->  (F(s', m'); I(s, m))OVERLAP_F_B  W(s, m)
//
// Comm insertion then puts sSEND_B m (the input gradient of I, when stage
// s-1 lives on another rank) after the composite and before the W: both
// insertion orders place a send right after its producer's step and ahead of
// any later compute step, so the gradient leaves as soon as dx exists, and dw
// runs while it travels. That is hyper-parallel's dx -> send_bwd -> dw
// sequence; the one difference is that hyper-parallel runs dw inside the
// composite's backward thread, still alongside the forward, whereas here an
// overlap holds exactly two sub-steps, so W runs after the forward finished.
//
// Backwards outside overlaps, and overlaps whose backward already is an I or
// a W, are left alone (Split splits them all). The input is not modified.
func DxDwInOverlap(p ir.Program) (ir.Program, error) {
	if err := checkSteps(p, "dxdw", false); err != nil {
		return ir.Program{}, err
	}
	return splitBackwards(p, true), nil
}

// hasOverlap reports whether any rank of p holds an overlap step.
func hasOverlap(p ir.Program) bool {
	for _, steps := range p.Ranks {
		for i := range steps {
			if steps[i].Kind.IsOverlap() {
				return true
			}
		}
	}
	return false
}

// CheckOptions reports options of opt that cannot apply to the compute
// order p, before any lowering: DxDwInOverlap without Overlap on an order
// that has no overlap steps. Lower fails the same way in its "dxdw" pass;
// callers that tell bad input from lowering failures (the CLI's exit
// status) check first.
func CheckOptions(p ir.Program, opt Options) error {
	if opt.DxDwInOverlap && !opt.Overlap && !hasOverlap(p) {
		return &Error{Pass: "dxdw", Rank: -1, Index: -1, Reason: errNoOverlap}
	}
	return nil
}

// errNoOverlap is the reason Lower's "dxdw" pass gives when the order has no
// overlap to split and the overlap pass did not run.
const errNoOverlap = "dxdw-in-overlap splits the backward inside overlap steps, and this compute order has none; add the overlap option (-overlap) to pair backwards with forwards, or use a schedule with overlaps such as dualpipev"
