package passes

import (
	"slices"

	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
)

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
	par.ForRanks(len(p.Ranks), p.NumSteps(), func(r int) {
		steps := p.Ranks[r]
		q.Ranks[r] = steps
		for i := range steps {
			if steps[i].Kind == ir.OptStep {
				return
			}
		}
		if !inPlace {
			steps = steps[:len(steps):len(steps)] // force a copy
		}
		q.Ranks[r] = append(steps, ir.Step{Kind: ir.OptStep, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None})
	})
	return q
}

// beforeOptStep returns a copy of steps with extra at the end of the
// iteration: after the rank's last transfer, batch bracket, compute step
// and TIE_GRAD, and before its OPT_STEP (at the end without one). Where a
// transfer comes after OPT_STEP (the timed comm order can leave a last send
// there when the compute order holds OPT_STEP), OPT_STEP moves behind it and
// extra: the steps placed here (TIE_GRAD, ALL_REDUCE) wait for every rank's
// stream to drain, so a send after them that another rank needs first
// would deadlock.
func beforeOptStep(steps []ir.Step, extra ...ir.Step) []ir.Step {
	last := -1
	for i, st := range steps {
		if k := st.Kind; k.IsComm() || k.IsBatch() || k.IsCompute() || k == ir.TieGrad {
			last = i
		}
	}
	opt := slices.IndexFunc(steps, func(st ir.Step) bool { return st.Kind == ir.OptStep })
	switch {
	case opt < 0:
		return slices.Concat(steps, extra)
	case opt > last:
		return slices.Concat(steps[:opt], extra, steps[opt:])
	}
	return slices.Concat(steps[:opt], steps[opt+1:last+1], extra, steps[opt:opt+1], steps[last+1:])
}
