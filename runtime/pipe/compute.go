package pipe

import (
	"errors"
	"fmt"
	"math"

	"gorgonia.org/tensor"
)

// The compute steps (DATA_LOAD, F, B, I, W, OPT_STEP). Every step method
// has a fast path and a slow path. The fast path tests, in as few
// comparisons as it can, that every check of the step passes, and only then
// runs the step's body; when any check fails (or the step is unusual) it
// hands the unchanged state to the slow path, which runs the checks one by
// one, in order, reports the first that fails, or runs the same body. So
// both paths do exactly the same (FuzzExecPaths compares them), and the fast
// path never has to explain an error.
//
// The step methods are kept out of line (go:noinline) on purpose: generated
// rank functions hold hundreds of thousands of calls, and inlining even a
// small wrapper into each multiplies the compiler's work. Their fast paths
// are small enough that the compiler would otherwise inline some.

// Load loads the input (stage 0, or the first stage of micro's model copy)
// and/or the labels (the last stage of micro's route) of micro into slot.
//
//go:noinline
func (x *Exec) Load(a At) {
	stage, micro, slot, _ := a.fields()
	if x.failed.Load() {
		return
	}
	// stage begins or ends a route, so keyable; it is on this rank iff its
	// Stage is set, which a slot holding it already proves.
	if uint(stage) < uint(len(x.ends)) && x.ends[stage] != 0 && uint(micro) < uint(x.micro) && uint(slot) < uint(len(x.slots)) {
		s := &x.slots[slot]
		k := keyOf(stage, micro)
		if s.key == k || (s.flags&pending == 0 && x.stages[stage] != nil && x.onRoute(stage, micro)) {
			if s.key != k {
				s.start(k)
			}
			x.load(s, stage, micro)
			return
		}
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, slot, _ = a.Unpack()
	x.loadSlow(stage, micro, slot)
}

func (x *Exec) loadSlow(stage, micro, slot int) {
	if x.ownerLoad(stage, micro, slot) {
		return
	}
	if !x.valid(stage, micro, slot) {
		x.badArgs(OpDataLoad, stage, micro, slot, -1)
		return
	}
	if !x.routeFirst(stage) && !x.routeLast(stage) {
		x.stepFailf(OpDataLoad, stage, micro, -1, "only the first and the last stage of a model copy load data (stage 0 and %d for one pipeline)", x.last)
		return
	}
	s := &x.slots[slot]
	if !x.claim(OpDataLoad, s, slot, stage, micro, -1) {
		return
	}
	x.load(s, stage, micro)
}

// load is the body of DATA_LOAD once the slot holds the chunk.
func (x *Exec) load(s *slotState, stage, micro int) {
	ends := x.ends[stage]
	if ends&routeStart != 0 {
		in, err := x.data.Input(micro)
		if err != nil || in == nil {
			x.dataFail(stage, micro, err, "input")
			return
		}
		s.x = in
	}
	if ends&loadsLabels != 0 {
		t, err := x.data.Target(micro)
		if err != nil || t == nil {
			x.dataFail(stage, micro, err, "target")
			return
		}
		s.target = t
	}
}

func (x *Exec) dataFail(stage, micro int, err error, what string) {
	if err == nil {
		err = errors.New("data source returned a nil " + what)
	}
	x.stepFail(OpDataLoad, stage, micro, -1, err)
}

// F runs F(stage, micro) into slot. Its input is y of slot src (the
// previous stage on this rank) when src >= 0; otherwise the slot's loaded
// input (stage 0) or completed receive. On the last stage it also computes
// the loss and keeps dy.
//
//go:noinline
func (x *Exec) F(a At) {
	stage, micro, slot, src := a.fields()
	if src == atNone {
		src = -1
	}
	if x.failed.Load() {
		return
	}
	if keyable(stage, micro) && uint(slot) < uint(len(x.slots)) && uint(stage) < uint(len(x.ends)) {
		s := &x.slots[slot]
		k := keyOf(stage, micro)
		ends := x.ends[stage]
		var in *tensor.Dense
		if src >= 0 {
			// Slot src holding (stage-1, micro) proves micro valid; stage
			// must be on this rank, and the slot free to claim (no pending
			// receive) or holding the chunk before its F.
			if uint(src) < uint(len(x.slots)) && src != slot && ends&routeStart == 0 {
				if p := &x.slots[src]; p.key == keyOf(stage-1, micro) && x.stages[stage] != nil &&
					((s.key == k && s.flags&fwdDone == 0) || (s.key != k && s.flags&pending == 0)) {
					in = p.y
				}
			}
		} else if s.key == k && s.flags&(fwdDone|actPending) == 0 {
			// The slot holding (stage, micro) proves both valid. A pending
			// receive takes the slow path, which waits for it.
			if ends&routeStart != 0 {
				in = s.x
			} else {
				in = s.ract
			}
		}
		// The last stage's F needs the labels, which only a DataLoad into
		// the slot already holding the chunk can have put there.
		if in != nil && (ends&routeEnd == 0 || (s.key == k && s.target != nil && s.flags&dataPending == 0)) {
			if s.key != k {
				s.start(k)
			} else if src < 0 && ends&routeStart == 0 {
				s.ract = nil
			}
			x.forward(s, slot, stage, micro, in)
			return
		}
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, slot, src = a.Unpack()
	x.forwardSlow(stage, micro, slot, src)
}

func (x *Exec) forwardFail(stage, micro int, err error) {
	if err == nil {
		err = errors.New("stage returned a nil output")
	}
	x.stepFail(OpForward, stage, micro, -1, err)
}

func (x *Exec) lossFail(stage, micro int, err error) {
	if err == nil {
		err = errors.New("loss returned a nil gradient")
	}
	x.stepFail(OpForward, stage, micro, -1, fmt.Errorf("loss: %w", err))
}

func (x *Exec) forwardSlow(stage, micro, slot, src int) {
	if !x.valid(stage, micro, slot) {
		x.badArgs(OpForward, stage, micro, slot, -1)
		return
	}
	s := &x.slots[slot]
	var in *tensor.Dense
	switch {
	case src >= 0:
		if src >= len(x.slots) || src == slot {
			x.stepFailf(OpForward, stage, micro, -1, "source slot %d invalid (slot %d, %d slots)", src, slot, len(x.slots))
			return
		}
		if x.routeFirst(stage) {
			x.stepFailf(OpForward, stage, micro, -1, "source slot %d, but stage %d begins its micro-batches' route: its input is a data load", src, stage)
			return
		}
		p := &x.slots[src]
		if !p.holds(stage-1, micro) || p.y == nil {
			x.stepFailf(OpForward, stage, micro, -1, "source slot %d holds no output of F(%d, %d)", src, stage-1, micro)
			return
		}
		if !x.claim(OpForward, s, slot, stage, micro, -1) {
			return
		}
		in = p.y
	case x.routeFirst(stage):
		if !s.holds(stage, micro) || (s.x == nil && s.flags&actPending == 0 && s.ract == nil) {
			if x.owner(micro) >= 0 && x.owner(micro) != x.rank {
				x.stepFailf(OpForward, stage, micro, -1, "no input in slot %d: RecvInput(%d, %d) from its owner, rank %d, into it was not posted", slot, stage, micro, x.owner(micro))
				return
			}
			x.stepFailf(OpForward, stage, micro, -1, "no input in slot %d: DataLoad(0, %d) into it has not run", slot, micro)
			return
		}
		if in = x.takeInput(s); in == nil {
			return // the receive failed: the rank has failed
		}
	default:
		if !s.holds(stage, micro) || (s.flags&actPending == 0 && s.ract == nil) {
			x.stepFailf(OpForward, stage, micro, -1, "no input in slot %d: RecvAct(%d, %d) into it was not posted", slot, stage, micro)
			return
		}
		if s.flags&actPending != 0 {
			<-s.actDone
			s.flags &^= actPending
			if x.failed.Load() {
				return
			}
		}
		in, s.ract = s.ract, nil
	}
	if s.flags&fwdDone != 0 {
		x.stepFailf(OpForward, stage, micro, -1, "F already ran for this chunk")
		return
	}
	x.forward(s, slot, stage, micro, in)
}

// forward is the body of F: it runs the checked F of the chunk (stage,
// micro) in s (slot) on input in, and on the route's last stage its loss.
func (x *Exec) forward(s *slotState, slot, stage, micro int, in *tensor.Dense) {
	y, saved, err := x.stages[stage].Forward(in)
	if err != nil || y == nil {
		x.forwardFail(stage, micro, err)
		return
	}
	// The input is the stage's to keep (in saved) or drop: the slot lets
	// go of it, so a swapped-out chunk leaves nothing of its own behind.
	s.x, s.y, s.saved = nil, y, saved
	s.flags |= fwdDone
	if x.ends[stage]&routeEnd != 0 {
		if s.flags&dataPending != 0 && !x.takeLabels(s) {
			return
		}
		if s.target == nil {
			x.stepFailf(OpForward, stage, micro, -1, "no labels in slot %d: DataLoad(%d, %d) into it has not run", slot, stage, micro)
			return
		}
		loss, dy, err := x.loss.Loss(y, s.target)
		if err != nil || dy == nil {
			x.lossFail(stage, micro, err)
			return
		}
		x.losses[micro].Store(math.Float64bits(loss))
		s.dy = dy
	}
}

// B runs the full backward B(stage, micro) of the chunk in slot: input
// gradient, then weight gradient. dy is dx of slot src (the next stage on
// this rank) when src >= 0; otherwise the completed receive, or on the last
// stage the loss gradient.
//
//go:noinline
func (x *Exec) B(a At) {
	if x.failed.Load() {
		return
	}
	if s, stage, micro, dy := x.backwardReady(a); dy != nil {
		x.backward(OpBackward, s, stage, micro, dy)
		return
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, slot, src := a.Unpack()
	x.backwardSlow(OpBackward, stage, micro, slot, src)
}

// I runs I(stage, micro): the input gradient only. dy as for B. W must
// follow for the weight gradient.
//
//go:noinline
func (x *Exec) I(a At) {
	if x.failed.Load() {
		return
	}
	if s, stage, micro, dy := x.backwardReady(a); dy != nil {
		x.backward(OpBackwardInput, s, stage, micro, dy)
		return
	}
	stage, micro, slot, src := a.Unpack()
	x.backwardSlow(OpBackwardInput, stage, micro, slot, src)
}

// backwardReady is the fast check of B and I: the slot holding (stage,
// micro), which proves both valid, between its F and its backward, and its
// output gradient dy; dy is nil when the slow path must run.
func (x *Exec) backwardReady(a At) (s *slotState, stage, micro int, dy *tensor.Dense) {
	stage, micro, slot, src := a.fields()
	if !keyable(stage, micro) || uint(slot) >= uint(len(x.slots)) {
		return nil, 0, 0, nil
	}
	if s = &x.slots[slot]; s.key != keyOf(stage, micro) || s.flags&(fwdDone|inDone|swappedOut) != fwdDone {
		return nil, 0, 0, nil
	}
	if src == atNone {
		src = -1
	}
	return s, stage, micro, x.fastDy(s, stage, micro, slot, src)
}

// fastDy returns the output gradient for the backward of the chunk (stage,
// micro) that s = &x.slots[slot] holds, between its F and its backward, with
// source slot src; nil when the slow path must find it (an error, or a
// receive still to wait for). It consumes a completed receive.
func (x *Exec) fastDy(s *slotState, stage, micro, slot, src int) *tensor.Dense {
	switch {
	case src >= 0:
		if uint(src) < uint(len(x.slots)) && src != slot {
			if p := &x.slots[src]; p.key == keyOf(stage+1, micro) {
				return p.dx
			}
		}
		return nil
	case x.routeLast(stage):
		return s.dy
	case s.flags&gradPending != 0:
		return nil
	}
	dy := s.rgrad
	s.rgrad = nil
	return dy
}

func (x *Exec) backwardSlow(k OpKind, stage, micro, slot, src int) {
	s := x.heldChunk(k, stage, micro, slot)
	if s == nil {
		return
	}
	if s.flags&(fwdDone|inDone) != fwdDone {
		x.stepFailf(k, stage, micro, -1, "chunk in slot %d is not between its F and its backward (F ran: %v, backward ran: %v)", slot, s.flags&fwdDone != 0, s.flags&inDone != 0)
		return
	}
	if s.flags&swappedOut != 0 {
		x.stepFailf(k, stage, micro, -1, "the chunk's saved activations are swapped out: SWAP_LAUNCH_LOAD of (%d, %d) must come first", stage, micro)
		return
	}
	var dy *tensor.Dense
	switch {
	case src >= 0:
		if src >= len(x.slots) || src == slot {
			x.stepFailf(k, stage, micro, -1, "source slot %d invalid (slot %d, %d slots)", src, slot, len(x.slots))
			return
		}
		if x.routeLast(stage) {
			x.stepFailf(k, stage, micro, -1, "source slot %d, but stage %d ends its micro-batches' route: its output gradient is the loss's", src, stage)
			return
		}
		p := &x.slots[src]
		if !p.holds(stage+1, micro) || p.dx == nil {
			x.stepFailf(k, stage, micro, -1, "source slot %d holds no input gradient of (%d, %d)", src, stage+1, micro)
			return
		}
		dy = p.dx
	case x.routeLast(stage):
		dy = s.dy
	default:
		if s.flags&gradPending == 0 && s.rgrad == nil {
			x.stepFailf(k, stage, micro, -1, "no output gradient in slot %d: RecvGrad(%d, %d) into it was not posted", slot, stage, micro)
			return
		}
		if s.flags&gradPending != 0 {
			<-s.gradDone
			s.flags &^= gradPending
			if x.failed.Load() {
				return
			}
		}
		dy, s.rgrad = s.rgrad, nil
	}
	x.backward(k, s, stage, micro, dy)
}

// backward is the body of B and I (k): the checked backward of the chunk
// (stage, micro) in s with output gradient dy.
func (x *Exec) backward(k OpKind, s *slotState, stage, micro int, dy *tensor.Dense) {
	dx, err := x.stages[stage].BackwardInput(s.saved, dy)
	if err != nil {
		x.stepFail(k, stage, micro, -1, err)
		return
	}
	s.dy, s.dx = dy, dx
	s.flags |= inDone
	if k == OpBackward {
		x.backwardWeight(k, s, stage, micro)
	}
}

// W runs W(stage, micro): the weight gradient of a chunk whose I
// ran.
//
//go:noinline
func (x *Exec) W(a At) {
	stage, micro, slot, _ := a.fields()
	if x.failed.Load() {
		return
	}
	if keyable(stage, micro) && uint(slot) < uint(len(x.slots)) {
		if s := &x.slots[slot]; s.key == keyOf(stage, micro) && s.flags&(inDone|wDone|swappedOut) == inDone {
			x.backwardWeight(OpBackwardWeight, s, stage, micro)
			return
		}
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, slot, _ = a.Unpack()
	x.weightSlow(stage, micro, slot)
}

func (x *Exec) weightSlow(stage, micro, slot int) {
	const k = OpBackwardWeight
	s := x.heldChunk(k, stage, micro, slot)
	if s == nil {
		return
	}
	if s.flags&(inDone|wDone) != inDone {
		x.stepFailf(k, stage, micro, -1, "chunk in slot %d is not between its I and its W (I ran: %v, W ran: %v)", slot, s.flags&inDone != 0, s.flags&wDone != 0)
		return
	}
	if s.flags&swappedOut != 0 {
		x.stepFailf(k, stage, micro, -1, "the chunk's saved activations are swapped out: SWAP_LAUNCH_LOAD of (%d, %d) must come first", stage, micro)
		return
	}
	x.backwardWeight(k, s, stage, micro)
}

// backwardWeight is the body of W (and B's second half, k): the weight
// gradient, after which the chunk is done and the slot lets go of it.
func (x *Exec) backwardWeight(k OpKind, s *slotState, stage, micro int) {
	if err := x.stages[stage].BackwardWeight(s.saved, s.dy); err != nil {
		x.stepFail(k, stage, micro, -1, err)
		return
	}
	s.flags |= wDone
	s.x, s.y, s.dy, s.saved = nil, nil, nil, nil
}

// OptStep runs the optimizer hook, if any; with two model copies
// (Spec.Copies = 2) it first sums their gradients (see CopyGrads).
//
//go:noinline
func (x *Exec) OptStep() {
	if x.failed.Load() {
		return
	}
	if x.copies > 1 {
		if err := x.syncCopies(); err != nil {
			x.stepFail(OpOptStep, 0, 0, -1, fmt.Errorf("summing the model copies' gradients: %w", err))
			return
		}
	}
	if x.optHook == nil {
		return
	}
	if err := x.optHook(); err != nil {
		x.stepFail(OpOptStep, 0, 0, -1, err)
	}
}
