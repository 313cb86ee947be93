package passes

import "github.com/ppgen/ppgen/gen/ir"

// The tests' inverse of Split (no command merges a program's backwards).

// merge is the inverse of Split: an I(s, m) immediately followed by its own
// W(s, m) becomes the full backward B(s, m), and an overlap whose backward
// sub-step is I(s, m), immediately followed by W(s, m), gets B(s, m) in its
// place and loses the W. Every other I and W stays (a W that does not follow
// its I, as zero-bubble schedules place it to fill bubbles, keeps the two
// halves apart). merge(Split(p)) is p for every program p, and
// Split(merge(q)) is q when every W of q follows its I.
//
// When the I and the W carry different slots (an edited lowered program),
// they are not merged. The input is not modified.
func merge(p ir.Program) (ir.Program, error) {
	if err := checkSteps(p, "merge", false); err != nil {
		return ir.Program{}, err
	}
	return mergePairs(p, func(steps []ir.Step, i int) (ir.Step, bool) {
		k := mergeableI(steps, i)
		if k < 0 {
			return ir.Step{}, false
		}
		st := steps[i]
		if st.Kind.IsOverlap() {
			st.Sub = append([]ir.Step(nil), st.Sub...)
			st.Sub[k].Kind = ir.Backward
		} else {
			st.Kind = ir.Backward
		}
		return st, true // the W is dropped
	}), nil
}

// mergeableI returns, when steps[i] is an I (or an overlap holding an I) that
// steps[i+1], its own W, follows, the I's position: 0 for the step itself,
// the sub-step index in an overlap; otherwise -1.
func mergeableI(steps []ir.Step, i int) int {
	if i+1 >= len(steps) || steps[i+1].Kind != ir.BackwardWeight {
		return -1
	}
	w := &steps[i+1]
	same := func(x *ir.Step) bool {
		return x.Kind == ir.BackwardInput && x.Stage == w.Stage && x.Micro == w.Micro && x.Slot == w.Slot
	}
	st := &steps[i]
	if st.Kind.IsOverlap() {
		for k := range st.Sub {
			if same(&st.Sub[k]) {
				return k
			}
		}
		return -1
	}
	if same(st) {
		return 0
	}
	return -1
}
