// Package program reads a generated Program table (ppgen gen -table: the
// steps of each rank as data) back as the lowered ir.Program, checked
// against the generated Fingerprint, so that an example can simulate
// (gen/sim) the very program its ranks run: examples/realisation and
// examples/charlm -realise.
package program

import (
	"fmt"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// Lowered returns the program of spec whose steps ops holds (one []pipe.Op
// per rank), after checking that it hashes to spec.Fingerprint: that it is
// exactly the program the generated rank functions run.
func Lowered(spec pipe.Spec, ops [][]pipe.Op) (ir.Program, error) {
	if len(ops) != spec.Ranks {
		return ir.Program{}, fmt.Errorf("program %s: the table has %d ranks, the Spec %d (generate with -table)", spec.Schedule, len(ops), spec.Ranks)
	}
	pl, err := ir.Table(spec.Ranks, spec.RankOf)
	if err != nil {
		return ir.Program{}, err
	}
	p := ir.NewProgram(pl, spec.Micro)
	p.Copies = spec.Copies
	for _, t := range spec.Ties {
		p.Ties = append(p.Ties, ir.Tie{A: t.A, B: t.B})
	}
	for r, row := range ops {
		for _, op := range row {
			k := op.Kind // pipe.OpKind and ir.Kind are one type, abi.Kind
			if !k.Valid() || k.IsOverlap() {
				return ir.Program{}, fmt.Errorf("program %s: rank %d: op %v: kind not supported here", spec.Schedule, r, op)
			}
			st := ir.Step{Kind: k, Stage: int(op.Stage), Micro: int(op.Micro), Peer: int(op.Peer), Slot: int(op.Slot)}
			if k == ir.OptStep {
				st = ir.Step{Kind: k, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}
			}
			p.Ranks[r] = append(p.Ranks[r], st)
		}
	}
	if fp := emit.Fingerprint(p); fp != spec.Fingerprint {
		return ir.Program{}, fmt.Errorf("program %s: the Program table does not hash to the generated Fingerprint (%s != %s)", spec.Schedule, fp, spec.Fingerprint)
	}
	return p, nil
}

// AsTrained returns p as runtime/train runs it: the reduction of the
// gradient norm that clipping needs (an ALL_REDUCE, where `ppgen gen -clip`
// places it: before each rank's first OPT_STEP) unless p holds one, since
// the trainer runs it after the program, and the gathering of the step's
// loss from every rank after the optimizer (a second ALL_REDUCE after
// OPT_STEP), so that the simulator sees the work and the waits of the
// trainer's whole step. A rank without OPT_STEP gets neither.
func AsTrained(p ir.Program) ir.Program {
	clip := true
	for _, steps := range p.Ranks {
		for _, st := range steps {
			clip = clip && st.Kind != abi.AllReduce
		}
	}
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	reduce := ir.Step{Kind: abi.AllReduce, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}
	for r, steps := range p.Ranks {
		out := make([]ir.Step, 0, len(steps)+2)
		opt := false
		for _, st := range steps {
			if st.Kind == ir.OptStep && !opt && clip {
				out = append(out, reduce)
			}
			opt = opt || st.Kind == ir.OptStep
			out = append(out, st)
		}
		if opt {
			out = append(out, reduce) // the loss
		}
		q.Ranks[r] = out
	}
	return q
}
