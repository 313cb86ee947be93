package verify

import "github.com/ppgen/ppgen/gen/ir"

// memory computes the peak live chunks per rank and checks the limit.
func (c *checker) memory() error {
	c.rep.PeakActivations = make([]int, c.P)
	for r, steps := range c.p.Ranks {
		live, peak := 0, 0
		for i, st := range steps {
			if !st.Kind.IsCompute() {
				continue
			}
			subs := st.Computes()
			for _, sub := range subs {
				if sub.Kind == ir.Forward {
					live++
				}
			}
			if live > peak {
				peak = live
				if c.opt.MaxActivations > 0 && live > c.opt.MaxActivations {
					c.rep.PeakActivations[r] = peak
					return c.fail(r, i, st, Memory, "%d chunks are live here (from their F to their last backward), over the limit of %d; run a backward earlier or start fewer forwards in the warm-up", live, c.opt.MaxActivations)
				}
			}
			for _, sub := range subs {
				// a chunk ends at its W, or at its B when it has no I
				if sub.Kind == ir.BackwardWeight || sub.Kind == ir.Backward {
					live--
				}
			}
		}
		c.rep.PeakActivations[r] = peak
	}
	return nil
}

// slots checks slot assignment, when there is one: every step of a chunk
// uses one slot, and no two chunks of a slot are live at once.
func (c *checker) slots() error {
	c.rep.Slots = make([]int, c.P)
	assigned := false
	for _, steps := range c.p.Ranks {
		for _, st := range steps {
			if st.Slot >= 0 {
				assigned = true
			}
			for _, sub := range st.Sub {
				if sub.Slot >= 0 {
					assigned = true
				}
			}
		}
	}
	if !assigned {
		return nil
	}
	M := c.M
	n := c.S * M
	slotOf := make([]int32, n)
	first := make([]int32, n)
	last := make([]int32, n)
	for i := range slotOf {
		slotOf[i], first[i], last[i] = -1, -1, -1
	}
	// A chunk is live from its first step to its last use: its last step, or
	// a colocated neighbour reading it as src (F(s+1) reads (s), B/I(s-1) reads (s)).
	visit := func(r, i int, top, st ir.Step) error {
		if st.Kind == ir.OptStep || !st.Kind.HasMicro() {
			return nil
		}
		s, m := st.Stage, st.Micro
		ch := s*M + m
		if st.Slot < 0 {
			return c.fail(r, i, top, Slot, "%s has no slot, but the program's slots are assigned; every step of a chunk carries its slot", st)
		}
		if slotOf[ch] < 0 {
			slotOf[ch], first[ch] = int32(st.Slot), int32(i)
		} else if int(slotOf[ch]) != st.Slot {
			return c.fail(r, i, top, Slot, "%s uses slot %d, but its chunk (stage %d, micro %d) has slot %d since step %d; a chunk keeps one slot", st, st.Slot, s, m, slotOf[ch], first[ch])
		}
		last[ch] = max(last[ch], int32(i))
		switch st.Kind {
		case ir.Forward:
			if s > 0 && c.rankOf[s-1] == r {
				last[ch-M] = max(last[ch-M], int32(i))
			}
		case ir.Backward, ir.BackwardInput:
			if s < c.S-1 && c.rankOf[s+1] == r {
				last[ch+M] = max(last[ch+M], int32(i))
			}
		}
		c.rep.Slots[r] = max(c.rep.Slots[r], st.Slot+1)
		return nil
	}
	for r, steps := range c.p.Ranks {
		for i, st := range steps {
			if st.Kind.IsOverlap() {
				for _, sub := range st.Sub {
					if err := visit(r, i, st, sub); err != nil {
						return err
					}
				}
			} else if err := visit(r, i, st, st); err != nil {
				return err
			}
		}
	}
	// Sweep each rank: when a chunk starts, its slot's previous owner must be dead.
	for r, steps := range c.p.Ranks {
		owner := make([]int32, c.rep.Slots[r])
		for k := range owner {
			owner[k] = -1
		}
		start := func(i int, top, st ir.Step) error {
			if st.Kind == ir.OptStep || !st.Kind.HasMicro() {
				return nil
			}
			ch := int32(st.Stage*M + st.Micro)
			if first[ch] != int32(i) {
				return nil
			}
			k := slotOf[ch]
			if o := owner[k]; o >= 0 && o != ch && last[o] >= int32(i) {
				return c.fail(r, i, top, Slot, "%s starts chunk (stage %d, micro %d) in slot %d, which still holds chunk (stage %d, micro %d) until step %d; slot lifetimes must not overlap",
					st, st.Stage, st.Micro, k, int(o)/M, int(o)%M, last[o])
			}
			owner[k] = ch
			return nil
		}
		for i, st := range steps {
			if st.Kind.IsOverlap() {
				for _, sub := range st.Sub {
					if err := start(i, st, sub); err != nil {
						return err
					}
				}
			} else if err := start(i, st, st); err != nil {
				return err
			}
		}
	}
	return nil
}
