package passes

import (
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
)

// InsertData adds the data steps of a program: DATA_LOAD(0, m) (the input of
// micro m) right before each F(0, m) on stage 0's rank, and DATA_LOAD(S-1, m)
// (its labels) right before each F(S-1, m) on the last stage's rank. When the
// program has a single stage (S == 1) the one DATA_LOAD(0, m) loads both.
// With several copies (ir.Program.Route), stage 0 and S-1 read the first and
// last stage of micro m's route.
// A forward inside an overlap gets its load right before the composite step.
//
// Loads the program already holds are kept and not repeated, so the pass is
// idempotent. Steps naming stages or micro-batches out of range are copied
// unchanged (gen/verify reports them); the input is not modified.
func InsertData(p ir.Program) ir.Program {
	d := newDataLoads(p)
	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies, Ranks: make([][]ir.Step, len(p.Ranks))}
	for r, steps := range p.Ranks {
		q.Ranks[r] = d.appendRank(make([]ir.Step, 0, len(steps)+d.extra(p, r)), steps)
	}
	return q
}

// dataLoads inserts the loads of InsertData one rank at a time, so that
// Lower can run data and comm insertion without the intermediate program.
type dataLoads struct {
	S, M    int
	rt      ir.Program // the program's placement, micro count and copies (no steps), for Route
	present [2][]bool  // a DATA_LOAD of micro m already in the program: [0] stage 0, [1] last stage
	done    [2][]bool  // scratch for one rank
}

func newDataLoads(p ir.Program) *dataLoads {
	d := &dataLoads{S: p.Stages(), M: max(p.Micro, 0), rt: ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies}}
	for w := range d.present {
		d.present[w] = make([]bool, d.M)
		d.done[w] = make([]bool, d.M)
	}
	for _, steps := range p.Ranks {
		for i := range steps {
			if st := &steps[i]; st.Kind == ir.DataLoad && st.Micro >= 0 && st.Micro < d.M {
				if w := d.class(st.Stage, st.Micro); w >= 0 {
					d.present[w][st.Micro] = true
				}
			}
		}
	}
	return d
}

// class returns 0 for the first stage of micro m's route, 1 for its last
// stage (0 when they are one), -1 otherwise.
func (d *dataLoads) class(s, m int) int {
	first, last := 0, d.S-1 // Route with one copy
	if d.rt.Copies > 1 {
		first, last = d.rt.Route(m)
	}
	switch s {
	case first:
		return 0
	case last:
		return 1
	}
	return -1
}

// extra bounds the number of loads appendRank adds to rank r: M for each of
// stage 0 and the last stage (one class when they coincide) the rank holds,
// or with several copies one per route end the rank holds.
func (d *dataLoads) extra(p ir.Program, r int) int {
	n := 0
	if p.Copies > 1 {
		for m := range d.M {
			first, last := d.rt.Route(m)
			if p.Placement.Rank(first) == r {
				n++
			}
			if last != first && p.Placement.Rank(last) == r {
				n++
			}
		}
		return n
	}
	if p.Placement.Rank(0) == r {
		n += d.M
	}
	if d.S > 1 && p.Placement.Rank(d.S-1) == r {
		n += d.M
	}
	return n
}

// appendRank appends one rank's steps to dst with the loads inserted. Every
// rank starts from the program's own loads: stage 0 and the last stage each
// live on one rank, so ranks do not interact.
func (d *dataLoads) appendRank(dst, steps []ir.Step) []ir.Step {
	for w := range d.done {
		copy(d.done[w], d.present[w])
	}
	for i := range steps {
		st := &steps[i]
		if st.Kind == ir.Forward {
			dst = d.load(dst, st)
		} else if st.Kind.IsOverlap() {
			for k := range st.Sub {
				if st.Sub[k].Kind == ir.Forward {
					dst = d.load(dst, &st.Sub[k])
				}
			}
		}
		dst = append(dst, *st)
	}
	return dst
}

func (d *dataLoads) load(dst []ir.Step, c *ir.Step) []ir.Step {
	if c.Micro < 0 || c.Micro >= d.M {
		return dst
	}
	w := d.class(c.Stage, c.Micro)
	if w < 0 || d.done[w][c.Micro] {
		return dst
	}
	d.done[w][c.Micro] = true
	return append(dst, ir.Compute(ir.DataLoad, c.Stage, c.Micro))
}

// insertDataShared is InsertData for a caller that only reads the result:
// ranks that get no load share their step list with p instead of copying it
// (for Lower's fused "data+comm" pass, whose timed order builds fresh lists).
func insertDataShared(p ir.Program) ir.Program {
	d := newDataLoads(p)
	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies, Ranks: make([][]ir.Step, len(p.Ranks))}
	// Which ranks may get a load: read-only, in parallel. The few that
	// may are rebuilt one by one (appendRank's scratch is shared).
	may := make([]bool, len(p.Ranks))
	par.ForRanks(len(p.Ranks), p.NumSteps(), func(r int) { may[r] = d.mayLoad(p.Ranks[r]) })
	for r, steps := range p.Ranks {
		if !may[r] {
			q.Ranks[r] = steps
			continue
		}
		q.Ranks[r] = d.appendRank(make([]ir.Step, 0, len(steps)+d.extra(p, r)), steps)
	}
	return q
}

// mayLoad reports whether appendRank may insert a load into steps: whether
// one of them is a forward of the first or last stage of its micro's route.
func (d *dataLoads) mayLoad(steps []ir.Step) bool {
	if d.M == 0 {
		return false
	}
	for i := range steps {
		st := &steps[i]
		if st.Kind == ir.Forward && d.class(st.Stage, st.Micro) >= 0 {
			return true
		}
		if st.Kind.IsOverlap() {
			for k := range st.Sub {
				if st.Sub[k].Kind == ir.Forward && d.class(st.Sub[k].Stage, st.Sub[k].Micro) >= 0 {
					return true
				}
			}
		}
	}
	return false
}
