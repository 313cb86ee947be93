package pipe

import "slices"

// Recompute runs RECOMPUTE(stage, micro) in slot (`ppgen gen -recompute`):
// it re-runs the stage's Forward on the input the chunk's F kept and keeps
// what the stage saves, for the chunk's backward; the output is discarded
// (the F sent it on already, and the loss of the last stage was taken
// then). The stage is one of Spec.Recompute, whose F keep only the input:
// so a stage needs no change to recompute, and its activations are held
// only from its RECOMPUTE to its backward. A deterministic Forward rebuilds
// exactly what the F saved, so training with recompute equals training
// without it bit for bit. At is (stage, micro, slot, -1).
//
//go:noinline
func (x *Exec) Recompute(a At) {
	if x.failedNow() {
		return
	}
	const k = OpRecompute
	stage, micro, slot, _ := a.Unpack()
	if !x.valid(stage, micro, slot) {
		x.badArgs(k, stage, micro, slot, -1)
		return
	}
	s := &x.slots[slot]
	switch {
	case !x.recomputes(stage):
		x.stepFailf(k, stage, micro, -1, "stage %d does not recompute (it is not in Spec.Recompute %v), so its F kept what the stage saved", stage, x.spec.Recompute)
		return
	case s.key != keyOf(stage, micro) || s.flags&fwdDone == 0:
		x.stepFailf(k, stage, micro, -1, "slot %d does not hold the chunk after its F; RECOMPUTE follows the chunk's F", slot)
		return
	case s.flags&(inDone|wDone) != 0 || s.saved != nil:
		x.stepFailf(k, stage, micro, -1, "the chunk's activations are there already (a second RECOMPUTE, or one after its backward)")
		return
	case s.x == nil:
		x.stepFailf(k, stage, micro, -1, "the chunk kept no input to recompute from")
		return
	}
	_, saved, err := x.stages[stage].Forward(s.x)
	if !x.stepOK(k, stage, micro, err) {
		return
	}
	s.x, s.saved = nil, saved // the stage keeps the input in saved if it needs it
}

// recomputes reports whether stage is one of Spec.Recompute.
func (x *Exec) recomputes(stage int) bool {
	_, found := slices.BinarySearch(x.spec.Recompute, stage)
	return found
}
