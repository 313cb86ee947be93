package passes

import "github.com/ppgen/ppgen/gen/ir"

// InsertData adds the data steps of a program: DATA_LOAD(0, m) (the input of
// micro m) right before each F(0, m) on stage 0's rank, and DATA_LOAD(S-1, m)
// (its labels) right before each F(S-1, m) on the last stage's rank. When the
// program has a single stage (S == 1) the one DATA_LOAD(0, m) loads both.
// A forward inside an overlap gets its load right before the composite step.
//
// Loads the program already holds are kept and not repeated, so the pass is
// idempotent. Steps naming stages or micro-batches out of range are copied
// unchanged (gen/verify reports them); the input is not modified.
func InsertData(p ir.Program) ir.Program {
	S, M := p.Stages(), p.Micro
	last := S - 1
	// loaded[0][m]: DATA_LOAD(0,m) present; loaded[1][m]: DATA_LOAD(S-1,m).
	var loaded [2][]bool
	loaded[0] = make([]bool, max(M, 0))
	loaded[1] = make([]bool, max(M, 0))
	inRange := func(m int) bool { return m >= 0 && m < M }
	which := func(s int) int {
		switch s {
		case 0:
			return 0
		case last:
			return 1
		}
		return -1
	}
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind == ir.DataLoad && inRange(st.Micro) {
				if w := which(st.Stage); w >= 0 {
					loaded[w][st.Micro] = true
				}
			}
		}
	}
	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Ranks: make([][]ir.Step, len(p.Ranks))}
	for r, steps := range p.Ranks {
		out := make([]ir.Step, 0, len(steps)+len(steps)/2+1)
		for _, st := range steps {
			for _, c := range st.Computes() {
				if c.Kind != ir.Forward || !inRange(c.Micro) {
					continue
				}
				w := which(c.Stage)
				if w < 0 || loaded[w][c.Micro] {
					continue
				}
				loaded[w][c.Micro] = true
				out = append(out, ir.Compute(ir.DataLoad, c.Stage, c.Micro))
			}
			out = append(out, st)
		}
		q.Ranks[r] = out
	}
	return q
}
