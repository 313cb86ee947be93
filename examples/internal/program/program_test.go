package program

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/examples/charlm/program/zbv"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/generated/onef1b"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// TestLowered: the committed tables read back as the programs their
// fingerprints name (charlm's zbv with its tie, the catalog's 1f1b), and
// a table that differs by one step, or by its ranks, is refused.
func TestLowered(t *testing.T) {
	for _, c := range []struct {
		spec pipe.Spec
		ops  [][]pipe.Op
	}{{zbv.Spec, zbv.Program}, {onef1b.Spec, onef1b.Program}} {
		p, err := Lowered(c.spec, c.ops)
		if err != nil {
			t.Fatalf("%s: %v", c.spec.Schedule, err)
		}
		if p.Stages() != c.spec.Stages || len(p.Ranks) != c.spec.Ranks {
			t.Errorf("%s: %d stages, %d ranks; want %d, %d", c.spec.Schedule, p.Stages(), len(p.Ranks), c.spec.Stages, c.spec.Ranks)
		}
	}
	ops := make([][]pipe.Op, len(onef1b.Program))
	for r, row := range onef1b.Program {
		ops[r] = append([]pipe.Op(nil), row...)
	}
	ops[0][0].Micro++
	if _, err := Lowered(onef1b.Spec, ops); err == nil || !strings.Contains(err.Error(), "Fingerprint") {
		t.Errorf("a changed step: err = %v; want one about the Fingerprint", err)
	}
	if _, err := Lowered(onef1b.Spec, ops[:2]); err == nil || !strings.Contains(err.Error(), "ranks") {
		t.Errorf("two ranks of four: err = %v; want one about the ranks", err)
	}
}

// TestAsTrained: every rank gets the norm's ALL_REDUCE right before its
// OPT_STEP and the loss's right after; a program with its own ALL_REDUCE
// (-clip) gets only the loss's. The simulator charges both: at comm 0
// the makespan grows by opt + 2·allreduce.
func TestAsTrained(t *testing.T) {
	p, err := Lowered(zbv.Spec, zbv.Program)
	if err != nil {
		t.Fatal(err)
	}
	q := AsTrained(p)
	for r, steps := range q.Ranks {
		if n := len(steps) - len(p.Ranks[r]); n != 2 {
			t.Fatalf("rank %d: %d steps added, want 2", r, n)
		}
		last := len(steps) - 1
		if steps[last].Kind != abi.AllReduce || steps[last-1].Kind != ir.OptStep || steps[last-2].Kind != abi.AllReduce {
			t.Errorf("rank %d ends %v %v %v; want ALL_REDUCE OPT_STEP ALL_REDUCE", r, steps[last-2].Kind, steps[last-1].Kind, steps[last].Kind)
		}
	}
	if again := AsTrained(q); len(again.Ranks[0]) != len(q.Ranks[0])+1 {
		t.Errorf("a program with its ALL_REDUCE: %d steps on rank 0, want %d (the loss's only)", len(again.Ranks[0]), len(q.Ranks[0])+1)
	}
	base, err := sim.Run(p, sim.Cost{})
	if err != nil {
		t.Fatal(err)
	}
	trained, err := sim.Run(q, sim.Cost{Opt: 3, AllReduce: 5})
	if err != nil {
		t.Fatal(err)
	}
	if d := trained.Makespan - base.Makespan; d != 3+2*5 {
		t.Errorf("the trained program's makespan is %g longer, want 13 (opt 3, two reductions of 5)", d)
	}
}
