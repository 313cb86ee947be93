package schedules

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/ir"
)

func init() {
	Register(Family{
		Name:           "dualpipe",
		Summary:        "DualPipe (DeepSeek-V3): two model copies fed from both ends, forward of one direction overlapped with backward of the other (OVERLAP_F_B)",
		Constraints:    "virtual = 2 (one stage of each copy per rank); ranks even; micro even and ≥ 2·ranks",
		DefaultVirtual: 2,
		Build:          buildDualPipe,
	})
}

// DualPipePlacement returns the placement of a dualpipe program on P ranks.
//
// # How two model copies are represented
//
// DualPipe trains two copies A and B of a P-stage model. Copy A's stage i and
// copy B's stage P-1-i live on rank i; micro-batches of copy A enter at rank 0
// and walk up, those of copy B enter at rank P-1 and walk down. ppgen writes
// this as 2P virtual stages:
//
//   - stages 0..P-1 are copy A's stages 0..P-1, stage i on rank i;
//   - stages P..2P-1 are copy B's stages 0..P-1, stage P+j on rank P-1-j;
//
// so rank r holds stages r and 2P-1-r (the same table as the v placement,
// named "dualpipe" here because the data flow differs). The M micro-batches
// are split between the copies: micro-batches 0..M/2-1 run through copy A
// only (stages 0..P-1), micro-batches M/2..M-1 through copy B only (stages
// P..2P-1). Each (stage, micro-batch) pair that a copy runs has exactly one F
// and one backward (B, or I then W); the other pairs have none. Hence:
//
//   - F(s, m) takes its input from F(s-1, m) except at the first stage of its
//     copy (s = 0 or s = P), which loads data like stage 0 of any schedule;
//   - the backward of (s, m) takes its output gradient from (s+1, m) except
//     at the last stage of its copy (s = P-1 or s = 2P-1), which starts from
//     the loss; in particular stages P-1 and P (both on rank P-1) exchange
//     nothing.
//
// The program says so with Copies = 2 (ir.Program.Route); passes, verify
// and sim take the neighbour of a chunk as "(s±1, m) if micro m's route
// runs that stage, otherwise none" (which is also right for every other
// family). Stage P+j and stage j hold the same
// weights in DualPipe; keeping the two copies' gradients in sync (DualPipe's
// all-reduce between the copies) is outside the step order.
func DualPipePlacement(ranks int) ir.Placement {
	pl := ir.VShape(max(ranks, 0))
	pl.Name = "dualpipe"
	return pl
}

// buildDualPipe returns the order of DeepSeek's DualPipe (dualpipe.py of
// deepseek-ai/DualPipe, DeepSeek-V3 technical report §3.2) in the
// representation of DualPipePlacement. Each rank is at depth h = min(r,
// P-1-r) of the copy that enters at its end of the pipe ("near": copy A on
// ranks below P/2, copy B above) and at depth P-1-h of the other ("far"); the
// rank's order depends only on h, mirrored between the two halves. See
// zbDualOrder for the eight phases. F&B pairs of one copy's forward and the
// other's full backward are OVERLAP_F_B steps (F first).
//
// Compute-only, at F&B = F+B: every rank idles (P/2-1)(F&B+B-3W) units, the
// DualPipe paper's bubble (P-2 at F = I = W = 1, B = 2), and holds at most
// P+1 live chunks (one copy's stage each).
func buildDualPipe(cfg ir.Config) (ir.Program, error) {
	const name = "dualpipe"
	if err := zbCheckSizes(name, cfg, 2); err != nil {
		return ir.Program{}, err
	}
	ranks, m := cfg.Ranks, cfg.Micro
	if ranks%2 != 0 {
		try := fmt.Sprintf("try %d or %d", ranks-1, ranks+1)
		if ranks == 1 {
			try = "try 2"
		}
		return ir.Program{}, &ConstraintError{Schedule: name, Param: "ranks", Value: ranks,
			Want: fmt.Sprintf("an even number of ranks, half feeding each model copy (%s); dualpipev runs on any number", try)}
	}
	if m%2 != 0 || m < 2*ranks {
		lo, hi := 2*ranks, 2*ranks+2
		if m > 2*ranks {
			lo, hi = m-1, m+1
		}
		return ir.Program{}, &ConstraintError{Schedule: name, Param: "micro", Value: m,
			Want: fmt.Sprintf("an even M ≥ 2P = %d, half for each model copy (try %d or %d)", 2*ranks, lo, hi)}
	}
	pl := DualPipePlacement(ranks)
	if err := zbCheckPlacement(name, cfg, pl, fmt.Sprintf("the dualpipe table (rank r holds copy A's stage r and copy B's stage %d-r, numbered r and %d-r)", ranks-1, 2*ranks-1)); err != nil {
		return ir.Program{}, err
	}
	p := ir.NewProgram(pl, m)
	p.Copies = 2
	half := ranks / 2
	for r := range p.Ranks {
		h := min(r, ranks-1-r)
		near, far := r, 2*ranks-1-r // copy A's stage r, copy B's stage on rank r
		if r >= half {
			near, far = far, near
		}
		p.Ranks[r] = zbDualOrder(half, h, m/2, near, far, func(stage, k int) int {
			if stage >= ranks {
				return m/2 + k
			}
			return k
		})
	}
	return p, nil
}

// zbDualOrder returns one rank's order in DualPipe's eight phases, shared by
// dualpipe and dualpipev. The rank runs two stages: near, at depth h (0-based)
// of a pipeline of half ranks whose micro-batches enter close to it, and far,
// on the way back (dualpipe: the other copy; dualpipev: the up stage of the
// V). Each carries mh micro-batches in ascending order; micro maps a stage
// and a per-stage count to the micro-batch number. W's are queued in the
// order of their I's and popped oldest first. With n = half-h-1:
//
//  1. 2n forwards of near;
//  2. h+1 pairs F(near), F(far);
//  3. n triples I(far), W, F(far) (the far stage's first gradients arrive);
//  4. mh-2·half+h+1 pairs OVERLAP_F_B(F(near), B(far)), OVERLAP_F_B(F(far),
//     B(near)); on the turning rank (h = half-1) the first F(near), B(far)
//     run one after the other instead (DualPipe: to further reduce the bubble);
//  5. n pairs B(far), OVERLAP_F_B(F(far), B(near));
//  6. h+1 pairs of backward(far), backward(near), full B's for the first
//     half of them and I's (W deferred) from the middle on: the switch comes
//     before the far one of pair ⌊(h+1)/2⌋ for odd h, between the two for even h;
//  7. n pairs W, I(near);
//  8. h+1 W's.
func zbDualOrder(half, h, mh, near, far int, micro func(stage, k int) int) []ir.Step {
	n := half - h - 1
	b := zbDualRank{micro: micro, nFwd: map[int]int{}, nBwd: map[int]int{}, steps: make([]ir.Step, 0, 6*mh)}
	for i := 0; i < 2*n; i++ {
		b.add(b.f(near))
	}
	for i := 0; i <= h; i++ {
		b.add(b.f(near))
		b.add(b.f(far))
	}
	for i := 0; i < n; i++ {
		b.add(b.bwd(far, true))
		b.w()
		b.add(b.f(far))
	}
	for i := 0; i < mh-2*half+h+1; i++ {
		if i == 0 && h == half-1 {
			b.add(b.f(near))
			b.add(b.bwd(far, false))
		} else {
			b.overlap(near, far)
		}
		b.overlap(far, near)
	}
	for i := 0; i < n; i++ {
		b.add(b.bwd(far, false))
		b.overlap(far, near)
	}
	split := false
	for i := 0; i <= h; i++ {
		if i == (h+1)/2 && h%2 == 1 {
			split = true
		}
		b.add(b.bwd(far, split))
		if i == (h+1)/2 && h%2 == 0 {
			split = true
		}
		b.add(b.bwd(near, split))
	}
	for i := 0; i < n; i++ {
		b.w()
		b.add(b.bwd(near, true))
	}
	for i := 0; i <= h; i++ {
		b.w()
	}
	return b.steps
}

// zbDualRank accumulates one rank's DualPipe order: per-stage counts of the
// forwards and backwards run so far, and the queue of deferred W's.
type zbDualRank struct {
	micro          func(stage, k int) int
	nFwd, nBwd     map[int]int // per stage: forwards / backwards emitted so far
	weights, steps []ir.Step
}

// next returns the micro-batch of the next step counted in c for stage.
func (b *zbDualRank) next(c map[int]int, stage int) int {
	k := c[stage]
	c[stage] = k + 1
	return b.micro(stage, k)
}

func (b *zbDualRank) add(st ir.Step) { b.steps = append(b.steps, st) }

// f returns the next forward of stage.
func (b *zbDualRank) f(stage int) ir.Step {
	return ir.Compute(ir.Forward, stage, b.next(b.nFwd, stage))
}

// bwd returns the next backward of stage: a full B, or an I whose W is queued.
func (b *zbDualRank) bwd(stage int, split bool) ir.Step {
	mb := b.next(b.nBwd, stage)
	if !split {
		return ir.Compute(ir.Backward, stage, mb)
	}
	b.weights = append(b.weights, ir.Compute(ir.BackwardWeight, stage, mb))
	return ir.Compute(ir.BackwardInput, stage, mb)
}

// w appends the oldest queued W, if any.
func (b *zbDualRank) w() {
	if len(b.weights) > 0 {
		b.add(b.weights[0])
		b.weights = b.weights[1:]
	}
}

// overlap appends OVERLAP_F_B of the next forward of fs and the next full
// backward of bs.
func (b *zbDualRank) overlap(fs, bs int) {
	f := b.f(fs)
	b.add(ir.Overlap(ir.OverlapFB, f, b.bwd(bs, false)))
}
