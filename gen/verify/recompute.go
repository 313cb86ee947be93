package verify

import (
	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// The rule of RECOMPUTE (-recompute): a chunk (stage, micro) with a
// RECOMPUTE step keeps only its stage's input from its F to that step,
// which re-runs the forward to rebuild the activations its backward needs.
// So the step comes once, on the stage's rank (the generic structure check),
// after the chunk's F and before its first backward (B or I); a stage that
// recomputes one chunk recomputes every chunk it runs a backward for (the
// policy is per stage, and a chunk whose step is missing would reach its
// backward without activations); under FSDP it runs while its stage is
// unsharded, as the forward it re-runs must; and the memory model counts
// the chunk live at its F, not after it, and again from its RECOMPUTE;
// under a selective policy (ir.Program's RecomputeShare: a share f of the
// stage's layers) it counts the 1 − f the F keeps between the two. A
// chunk with a RECOMPUTE has no swap steps (swapping is the other way to
// free its activations; stages may take one each).
func init() {
	declareRule(&rule{kind: abi.Recompute, prepare: recomputePrepare, step: recomputeStep, check: recomputeCheck})
}

// recomputeCount is the rule's state: per chunk, its RECOMPUTE steps.
type recomputeCount []uint8

func recomputePrepare(c *checker) {
	c.dropAtF = make([]int, c.S*c.M)
	for _, steps := range c.p.Ranks {
		for i := range steps {
			if st := &steps[i]; st.Kind == abi.Recompute && st.Stage >= 0 && st.Stage < c.S && st.Micro >= 0 && st.Micro < c.M {
				c.dropAtF[st.Stage*c.M+st.Micro] = sharePart(c.p.RecomputePart(st.Stage))
			}
		}
	}
	if c.ruleState == nil {
		c.ruleState = map[ir.Kind]any{}
	}
	c.ruleState[abi.Recompute] = make(recomputeCount, c.S*c.M)
}

func recomputeStep(c *checker, r, i int, st *ir.Step) (int, error) {
	s, m := st.Stage, st.Micro
	ch := s*c.M + m
	count := c.ruleState[abi.Recompute].(recomputeCount)
	fwd := ir.Compute(ir.Forward, s, m)
	switch {
	case count[ch] > 0:
		return 0, c.fail(r, i, *st, Duplicate, "a second %s of chunk (stage %d, micro %d); its F dropped the activations once, and one RECOMPUTE rebuilds them", *st, s, m)
	case c.at[aF][ch] < 0:
		return 0, c.fail(r, i, *st, Order, "%s comes before %s on rank %d: it re-runs the forward from the input the F keeps, so it must follow it", *st, fwd, r)
	case c.at[aBwd][ch] >= 0:
		b := c.p.Ranks[r][c.at[aBwd][ch]]
		return 0, c.fail(r, i, *st, Order, "%s comes after the chunk's first backward (step %d, %s): the backward needs the activations RECOMPUTE rebuilds, so it must come before", *st, c.at[aBwd][ch], b)
	}
	count[ch]++
	return c.dropAtF[ch], nil
}

// recomputeCheck checks that a stage recomputes every chunk it runs a
// backward for, or none, and, in a program with FSDP steps, that each
// RECOMPUTE runs while its stage is unsharded (it runs the stage's forward,
// as a compute step does; the FSDP walk checks those).
func recomputeCheck(c *checker) error {
	count, ok := c.ruleState[abi.Recompute].(recomputeCount)
	if !ok {
		return nil // no RECOMPUTE step
	}
	if c.rep.PeakUnsharded != nil {
		if err := recomputeUnsharded(c); err != nil {
			return err
		}
	}
	M := c.M
	if c.swapState != nil {
		for ch, n := range count {
			if n > 0 && c.swapState[ch] != swapNone {
				return recomputeSwapped(c, ch/M, ch%M)
			}
		}
	}
	for s := range c.S {
		with := -1
		for m := range M {
			if count[s*M+m] > 0 {
				with = m
				break
			}
		}
		if with < 0 {
			continue
		}
		for m := range M {
			ch := s*M + m
			if count[ch] > 0 || c.at[aBwd][ch] < 0 {
				continue
			}
			r := c.rankOf[s]
			b := int(c.at[aBwd][ch])
			return c.fail(r, b, c.p.Ranks[r][b], Missing, "no RECOMPUTE of chunk (stage %d, micro %d) before its backward, but stage %d recomputes (micro %d has one), and a stage recomputes every chunk or none (-recompute is a policy per stage)", s, m, s, with)
		}
	}
	return nil
}

// recomputeSwapped is the error of chunk (s, m), which has a RECOMPUTE
// and swap steps: its F dropped the activations that RECOMPUTE rebuilds,
// so there is nothing for the swap to move (and one of the two would be
// counted twice); a chunk frees its activations one way.
func recomputeSwapped(c *checker, s, m int) error {
	r := c.rankOf[s]
	for i, st := range c.p.Ranks[r] {
		if st.Kind == abi.Recompute && st.Stage == s && st.Micro == m {
			return c.fail(r, i, st, Order, "chunk (stage %d, micro %d) has a RECOMPUTE and swap steps: its F keeps only what RECOMPUTE needs, so there is nothing to swap; a chunk frees its activations one way (-swap and -recompute over different stages)", s, m)
		}
	}
	return c.fail(r, -1, ir.Compute(abi.Recompute, s, m), Order, "chunk (stage %d, micro %d) has a RECOMPUTE and swap steps; a chunk frees its activations one way", s, m)
}

// recomputeUnsharded checks that every RECOMPUTE of a stage its rank
// UNSHARDs or RESHARDs runs after an UNSHARD of it and before the next
// RESHARD (the FSDP walk has checked that these alternate).
func recomputeUnsharded(c *checker) error {
	for r, steps := range c.p.Ranks {
		managed := map[int]bool{}
		for i := range steps {
			if k := steps[i].Kind; k == ir.Unshard || k == ir.Reshard {
				managed[steps[i].Stage] = true
			}
		}
		if len(managed) == 0 {
			continue
		}
		active := map[int]bool{}
		for i, st := range steps {
			switch st.Kind {
			case ir.Unshard:
				active[st.Stage] = true
			case ir.Reshard:
				active[st.Stage] = false
			case abi.Recompute:
				if managed[st.Stage] && !active[st.Stage] {
					return c.fail(r, i, st, FSDP, "%s runs stage %d's forward while its parameters are sharded; place it after an UNSHARD of the stage and before its RESHARD", st, st.Stage)
				}
			}
		}
	}
	return nil
}
