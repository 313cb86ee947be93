package verify

import (
	"github.com/ppgen/ppgen/gen/internal/strict"
	"github.com/ppgen/ppgen/gen/ir"
)

// rule is what the verifier knows of one step kind beyond the generic
// checks (structure, order of the chunk steps, matching, deadlock freedom,
// memory, slots), declared in the kind's own file (recompute.go's R) so
// that a new kind's rule touches neither Check nor the walk. A kind the
// generic checks cover needs none.
//
// Registration is the least machinery that keeps a rule in one file: the
// rule's file calls declareRule from an init function; the table is
// indexed by kind, so the order of the init functions does not matter
// (rules run in kind order).
type rule struct {
	kind ir.Kind
	// prepare runs once before the walk when the program holds a step of
	// the kind (it may set c.dropAtF, say).
	prepare func(c *checker)
	// step runs at each step of the kind in its rank's walk, after the
	// generic structure checks, and returns by how much the step changes
	// the rank's live chunks, in parts (chunkParts a chunk; the walk
	// checks the peak after a rise).
	// Ranks are walked in parallel: it may write only the state of its
	// rank's chunks (or its rank's entry of a per-rank table).
	step func(c *checker, r, i int, st *ir.Step) (live int, err error)
	// noStage: a step of the kind is a host step of no stage, which the
	// walk gives to step alone (no structure, order, slot or memory
	// check); its waits, if any, come from model.
	noStage bool
	// check runs after the walk, with the completeness checks, in kind
	// order; it is called for every program (a rule may check what the
	// program declares, such as ir.Program.Ties, without a step).
	check func(c *checker) error
	// model adds the waits of the kind's steps to the strict model before
	// the deadlock check (a rendezvous: TIE_GRAD, ALL_REDUCE); rules apply
	// theirs in kind order, every program.
	model func(c *checker, m *strict.Model) *strict.Model
	// hint, when a deadlock's cycle passes through a step of the kind,
	// says how to place such steps; the first kind's in kind order is
	// given.
	hint string
}

// rules holds the declared rules by kind; ruled lists their kinds in
// order.
var (
	rules [256]*rule
	ruled []ir.Kind
)

// declareRule adds rl to the table; rule files call it from an init
// function.
func declareRule(rl *rule) {
	if rules[rl.kind] != nil || int(rl.kind) >= len(checker{}.holds) {
		panic("verify: a second rule for " + rl.kind.String() + ", or a kind past the checker's holds")
	}
	rules[rl.kind] = rl
	ruled = append(ruled, rl.kind)
	// Keep kind order whatever the order of the init functions.
	for i := len(ruled) - 1; i > 0 && ruled[i] < ruled[i-1]; i-- {
		ruled[i], ruled[i-1] = ruled[i-1], ruled[i]
	}
}

// ruleChecks runs the check of every rule, in kind order.
func (c *checker) ruleChecks() error {
	for _, k := range ruled {
		if rl := rules[k]; rl.check != nil {
			if err := rl.check(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// ruleModels adds the waits of every rule's steps to m, in kind order.
func (c *checker) ruleModels(m *strict.Model) *strict.Model {
	for _, k := range ruled {
		if rl := rules[k]; rl.model != nil {
			m = rl.model(c, m)
		}
	}
	return m
}

// hintFor is the hint of the first kind, in kind order, whose rule has
// one and one of steps is of.
func hintFor(steps ...ir.Kind) string {
	for _, k := range ruled {
		if rules[k].hint != "" && containsKind(steps, k) {
			return rules[k].hint
		}
	}
	return ""
}

func containsKind(ks []ir.Kind, k ir.Kind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}
