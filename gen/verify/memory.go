package verify

import (
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
)

// chunkSpan is a chunk's slot and live interval (slot): its slot, the
// index of its first step and of its last use on its rank; -1 until known.
type chunkSpan struct{ slot, first, last int32 }

// slot records, during the walk, the slot and live interval of st's chunk.
// A chunk is live from its first step to its last use: its last step, or a
// colocated neighbour reading it as src (F(s+1) reads (s), B/I(s-1) reads
// (s): the cross-stage input, deps.Neighbour, when it is local).
func (c *checker) slot(rw *rankWalk, i int, top, st *ir.Step) {
	r := rw.r
	if st.Kind == ir.OptStep || !st.Kind.HasMicro() {
		return
	}
	if c.rankOf[st.Stage] != r {
		return // an owner's DATA_LOAD/MPIPE_FWD_SEND (leaf admitted it): no chunk of this rank
	}
	src := -1
	if _, x, _, local := c.neighbourAt(r, st); local {
		src = x
	}
	c.slotChunk(rw, i, top, st, st.Stage*c.M+st.Micro, src)
}

// slotChunk is slot for step st of chunk ch, on the rank's own stage,
// which reads chunk src as its src (-1: none).
func (c *checker) slotChunk(rw *rankWalk, i int, top, st *ir.Step, ch, src int) {
	sp := &c.spans[ch]
	if st.Slot < 0 {
		r := rw.r
		rw.noSlot.note(r, i, func() error {
			return c.fail(r, i, *top, Slot, "%s has no slot, but the program's slots are assigned; every step of a chunk carries its slot", *st)
		})
	} else {
		rw.slotted = true
		switch {
		case sp.slot < 0:
			sp.slot = int32(st.Slot)
			rw.slots = max(rw.slots, st.Slot+1)
		case int(sp.slot) != st.Slot:
			r := rw.r
			rw.slotErr.note(r, i, func() error {
				return c.fail(r, i, *top, Slot, "%s uses slot %d, but its chunk (stage %d, micro %d) has slot %d since step %d; a chunk keeps one slot", *st, st.Slot, st.Stage, st.Micro, c.spans[ch].slot, c.spans[ch].first)
			})
		}
	}
	if sp.first < 0 {
		sp.first = int32(i)
		rw.starts = append(rw.starts, int32(ch))
	}
	sp.last = max(sp.last, int32(i))
	if src >= 0 {
		sp := &c.spans[src]
		sp.last = max(sp.last, int32(i))
	}
}

// startSpan starts the span sp of chunk ch at its first step, index i,
// in slot slot, as slotChunk would, and reports whether it did: not where
// the chunk has a step or a slot already, where the step has no slot, or
// where the rank's chunk starts are full (slotChunk takes those). It
// inlines: fastRun asks it at every chunk's first step.
func (rw *rankWalk) startSpan(sp *chunkSpan, i, ch, slot int) bool {
	n := len(rw.starts)
	if sp.first >= 0 || sp.slot >= 0 || slot < 0 || n == cap(rw.starts) {
		return false
	}
	sp.slot, sp.first, sp.last = int32(slot), int32(i), max(sp.last, int32(i))
	rw.slotted = true
	rw.slots = max(rw.slots, slot+1)
	rw.starts = rw.starts[:n+1]
	rw.starts[n] = int32(ch)
	return true
}

// slots checks the slot assignment, when there is one: every step of a
// chunk carries the chunk's one slot, and when a chunk starts, the previous
// owner of its slot is dead.
func (c *checker) slots() error {
	if !c.slotted {
		for r := range c.rep.Slots {
			c.rep.Slots[r] = 0
		}
		return nil
	}
	first := c.noSlot
	if f := c.slotErr; f.fn != nil {
		first.note(f.rank, f.index, f.fn)
	}
	if first.fn != nil {
		return first.fn()
	}
	M := c.M
	var owner []int32
	spans := c.spans
	for r := range c.P {
		owner = par.Resize(owner, c.rep.Slots[r])
		fill(owner, -1)
		// Chunks in the order they start (the walk appended them so).
		for _, ch := range c.starts[r] {
			sp := spans[ch]
			k := sp.slot
			if k < 0 {
				continue // only read as a neighbour's src; it has no step of its own
			}
			if o := owner[k]; o >= 0 && spans[o].last >= sp.first {
				i := int(c.spans[ch].first)
				top := c.p.Ranks[r][i]
				st := top
				for _, sub := range top.Sub {
					if sub.Stage*M+sub.Micro == int(ch) {
						st = sub
					}
				}
				return c.fail(r, i, top, Slot, "%s starts chunk (stage %d, micro %d) in slot %d, which still holds chunk (stage %d, micro %d) until step %d; slot lifetimes must not overlap",
					st, int(ch)/M, int(ch)%M, k, int(o)/M, int(o)%M, c.spans[o].last)
			}
			owner[k] = ch
		}
	}
	return nil
}
