package passes

import "github.com/ppgen/ppgen/gen/ir"

// InsertOptStep appends OPT_STEP (the optimizer update of the rank's
// stages) to every rank's program, after its last step: the iteration is then
// self-contained, and the runtime calls the trainer's optimizer hook there.
// A rank whose program already has an OPT_STEP is left as it is.
func InsertOptStep(p ir.Program) ir.Program { return insertOptStep(p, false) }

// insertOptStep is InsertOptStep; with inPlace it may append to p's step
// lists (for Lower, after "comm", whose output nobody else holds) instead of
// copying each of them.
func insertOptStep(p ir.Program, inPlace bool) ir.Program {
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	for r, steps := range p.Ranks {
		has := false
		for _, st := range steps {
			has = has || st.Kind == ir.OptStep
		}
		q.Ranks[r] = steps
		if !has {
			if !inPlace {
				steps = steps[:len(steps):len(steps)] // force a copy
			}
			q.Ranks[r] = append(steps, ir.Step{Kind: ir.OptStep, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None})
		}
	}
	return q
}
