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
// one, in order, and reports the first that fails, or returns what the
// step's body needs. The body is written once, after both paths. So both
// paths do exactly the same (FuzzExecPaths compares them), and the fast path
// never has to explain an error.
//
// The step methods are kept out of line (go:noinline) on purpose: generated
// rank functions hold hundreds of thousands of calls, and inlining even a
// small wrapper into each multiplies the compiler's work. Their fast paths
// are small enough that the compiler would otherwise inline some.

// DataLoad loads the input (stage 0, or the first stage of micro's model copy)
// and/or the labels (the last stage of micro's route) of micro into slot.
//
//go:noinline
func (x *Exec) DataLoad(a At) {
	stage, micro, slot, _ := a.Fields()
	st := x.state.Load()
	// stage begins or ends a route, so keyable; it is on this rank iff its
	// Stage is set, which a slot holding it already proves.
	var s *slotState
	var ends uint8
	if st == 0 && uint(stage) < uint(len(x.ends)) && uint(micro) < uint(x.micro) && uint(slot) < uint(len(x.slots)) {
		ends = x.ends[stage]
		s = &x.slots[slot]
		if k := keyOf(stage, micro); ends == 0 {
			s = nil
		} else if s.key == k {
		} else if s.flags&pending == 0 && x.stages[stage] != nil && x.onRoute(stage, micro) {
			s.start(k)
		} else {
			s = nil
		}
	}
	if s == nil {
		if st&stFailed != 0 {
			return
		}
		// The slow path reports with the fields as given (0xffff as -1).
		stage, micro, slot, _ = a.Unpack()
		if s = x.loadSlow(stage, micro, slot); s == nil {
			return
		}
		ends = x.ends[stage]
	}
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

// loadSlow runs the checks of DATA_LOAD and returns the slot, holding the
// chunk, to load into; nil when there is none (reported, or an mpipe
// owner's load, done).
func (x *Exec) loadSlow(stage, micro, slot int) *slotState {
	if x.ownerLoad(stage, micro, slot) {
		return nil
	}
	if !x.valid(stage, micro, slot) {
		x.badArgs(OpDataLoad, stage, micro, slot, -1)
		return nil
	}
	if !x.routeFirst(stage) && !x.routeLast(stage) {
		x.stepFailf(OpDataLoad, stage, micro, -1, "only the first and the last stage of a model copy load data (stage 0 and %d for one pipeline)", x.last)
		return nil
	}
	s := &x.slots[slot]
	if !x.claim(OpDataLoad, s, slot, stage, micro, -1) {
		return nil
	}
	return s
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
	stage, micro, slot, src := a.Fields() // src atNone: none
	st := x.state.Load()
	var s *slotState
	var in *tensor.Dense
	var ends uint8 // x.ends[stage], once stage is known valid
	if st == 0 && keyable(stage, micro) && uint(slot) < uint(len(x.slots)) && uint(stage) < uint(len(x.ends)) {
		s = &x.slots[slot]
		k := keyOf(stage, micro)
		ends = x.ends[stage]
		if src != atNone {
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
		// The last stage's F needs the labels, which only a DATA_LOAD into
		// the slot already holding the chunk can have put there.
		if in != nil && (ends&routeEnd == 0 || (s.key == k && s.target != nil && s.flags&dataPending == 0)) {
			if s.key != k {
				s.start(k)
			} else if src == atNone && ends&routeStart == 0 {
				s.ract = nil
			}
		} else {
			s = nil
		}
	}
	if s == nil {
		if st&stFailed != 0 {
			return
		}
		// The slow path reports with the fields as given (0xffff as -1).
		stage, micro, slot, src = a.Unpack()
		if s, in = x.forwardSlow(stage, micro, slot, src); s == nil {
			return
		}
		ends = x.ends[stage]
	}
	y, saved, err := x.stages[stage].Forward(in)
	if err != nil || y == nil {
		x.forwardFail(stage, micro, err)
		return
	}
	// The input is the stage's to keep (in saved) or drop: the slot lets
	// go of it, so a swapped-out chunk leaves nothing of its own behind (a
	// forward-only program's stages return none: evalStage).
	s.x, s.y, s.saved = nil, y, saved
	if saved != nil {
		x.mem.add(chunkParts)
	}
	// a rebuild step (abi's IsRebuild: RECOMPUTE) rebuilds saved later:
	// the F keeps only what that needs (recompute.go's dropAtF)
	if ends&keepsInput != 0 && !x.dropAtF(s, stage, micro, in, saved) {
		return
	}
	s.flags |= fwdDone
	if ends&routeEnd != 0 {
		loss, dy, err := x.loss.Loss(y, s.target)
		if err != nil || dy == nil {
			x.lossFail(stage, micro, err)
			return
		}
		x.losses[micro].Store(math.Float64bits(loss))
		s.dy = dy
	}
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

// forwardSlow runs the checks of F and returns the slot, holding the chunk,
// and the input to run it on (waiting for a pending receive); a nil slot
// when a check failed (reported).
func (x *Exec) forwardSlow(stage, micro, slot, src int) (*slotState, *tensor.Dense) {
	if !x.valid(stage, micro, slot) {
		x.badArgs(OpForward, stage, micro, slot, -1)
		return nil, nil
	}
	s := &x.slots[slot]
	var in *tensor.Dense
	switch {
	case src >= 0:
		if in = x.sourceSlot(OpForward, stage, micro, slot, src, -1); in == nil || !x.claim(OpForward, s, slot, stage, micro, -1) {
			return nil, nil
		}
	case x.routeFirst(stage):
		if !s.holds(stage, micro) || (s.x == nil && s.flags&actPending == 0 && s.ract == nil) {
			if x.owner(micro) >= 0 && x.owner(micro) != x.rank {
				x.stepFailf(OpForward, stage, micro, -1, "no input in slot %d: %s from its owner, rank %d, into it was not posted", slot, stepName(OpMpipeRecv, stage, micro), x.owner(micro))
				return nil, nil
			}
			x.stepFailf(OpForward, stage, micro, -1, "no input in slot %d: %s into it has not run", slot, stepName(OpDataLoad, stage, micro))
			return nil, nil
		}
		if in = x.takeInput(s, micro); in == nil {
			return nil, nil // the receive failed: the rank has failed
		}
	default:
		if !s.holds(stage, micro) || (s.flags&actPending == 0 && s.ract == nil) {
			x.stepFailf(OpForward, stage, micro, -1, "no input in slot %d: %s into it was not posted", slot, stepName(OpRecvF, stage, micro))
			return nil, nil
		}
		if !x.await(s, actPending) {
			return nil, nil
		}
		in, s.ract = s.ract, nil
	}
	if s.flags&fwdDone != 0 {
		x.stepFailf(OpForward, stage, micro, -1, "F already ran for this chunk")
		return nil, nil
	}
	// The last stage's F needs the labels (waited for here, before the
	// stage runs).
	if x.routeLast(stage) {
		if s.flags&dataPending != 0 && !x.takeLabels(s) {
			return nil, nil
		}
		if s.target == nil {
			if x.spec.ShipLabels && !x.routeFirst(stage) {
				x.stepFailf(OpForward, stage, micro, -1, "no labels in slot %d: %s into it was not posted", slot, stepName(OpDataRecv, stage, micro))
			} else {
				x.stepFailf(OpForward, stage, micro, -1, "no labels in slot %d: %s into it has not run", slot, stepName(OpDataLoad, stage, micro))
			}
			return nil, nil
		}
	}
	return s, in
}

// sourceSlot checks the source slot src of compute step k of the chunk
// (stage, micro) in slot, and returns what the step takes from it: the
// output of F(stage-1, micro) for a forward (dir -1), the input gradient of
// (stage+1, micro) for a backward (dir +1); nil after reporting why not.
func (x *Exec) sourceSlot(k OpKind, stage, micro, slot, src, dir int) *tensor.Dense {
	if src >= len(x.slots) || src == slot {
		x.stepFailf(k, stage, micro, -1, "source slot %d invalid (slot %d, %d slots)", src, slot, len(x.slots))
		return nil
	}
	if dir < 0 && x.routeFirst(stage) {
		x.stepFailf(k, stage, micro, -1, "source slot %d, but stage %d begins its micro-batches' route: its input is a data load", src, stage)
		return nil
	}
	if dir > 0 && x.routeLast(stage) {
		x.stepFailf(k, stage, micro, -1, "source slot %d, but stage %d ends its micro-batches' route: its output gradient is the loss's", src, stage)
		return nil
	}
	p := &x.slots[src]
	t, what := p.y, "output of "+stepName(OpForward, stage+dir, micro)
	if dir > 0 {
		t, what = p.dx, "input gradient of "+stepName(OpBackward, stage+dir, micro)+" or "+stepName(OpBackwardInput, stage+dir, micro)
	}
	if !p.holds(stage+dir, micro) || t == nil {
		x.stepFailf(k, stage, micro, -1, "source slot %d holds no %s", src, what)
		return nil
	}
	return t
}

// B runs the full backward B(stage, micro) of the chunk in slot: input
// gradient, then weight gradient. dy is dx of slot src (the next stage on
// this rank) when src >= 0; otherwise the completed receive, or on the last
// stage the loss gradient.
//
//go:noinline
func (x *Exec) B(a At) {
	stage, micro, slot, src := a.Fields()
	var s *slotState
	var dy *tensor.Dense
	if x.state.Load() == 0 && keyable(stage, micro) && uint(slot) < uint(len(x.slots)) {
		if p := &x.slots[slot]; p.key == keyOf(stage, micro) && p.flags&(fwdDone|inDone|swappedOut) == fwdDone {
			// readyGrad's cases, written out: measured 2–3 % faster per
			// step than its inlined call (docs/benchmarks-log.md §2).
			switch {
			case src != atNone:
				if uint(src) < uint(len(x.slots)) {
					if q := &x.slots[src]; q.key == keyOf(stage+1, micro) && q.dx != nil {
						s, dy = p, q.dx
					}
				}
			case x.routeLast(stage):
				if p.dy != nil {
					s, dy = p, p.dy
				}
			case p.flags&gradPending == 0 && p.rgrad != nil:
				s, dy, p.rgrad = p, p.rgrad, nil
			}
		}
	}
	if s == nil {
		if s, stage, micro, dy = x.backwardArgs(OpBackward, a); s == nil {
			return
		}
	}
	sg := x.stages[stage]
	dx, err := sg.BackwardInput(s.saved, dy)
	if err == nil {
		s.inputGradDone(dy, dx)
		if x.tower != nil {
			x.keepTowerGrad(stage, micro, dx)
		}
		err = sg.BackwardWeight(s.saved, dy)
	}
	if x.stepOK(OpBackward, stage, micro, err) {
		if x.rec != nil {
			x.recycle(s, int(a>>16&atNone)) // the At's slot
		}
		x.release(s)
	}
}

// I runs I(stage, micro): the input gradient only. dy as for B. W must
// follow for the weight gradient.
//
//go:noinline
func (x *Exec) I(a At) {
	if s, stage, micro, dy := x.backwardArgs(OpBackwardInput, a); s != nil {
		dx, err := x.stages[stage].BackwardInput(s.saved, dy)
		if x.stepOK(OpBackwardInput, stage, micro, err) {
			s.inputGradDone(dy, dx)
			if x.tower != nil {
				x.keepTowerGrad(stage, micro, dx)
			}
		}
	}
}

// W runs W(stage, micro): the weight gradient of a chunk whose I ran. Its
// At is (stage, micro, slot, -1).
//
//go:noinline
func (x *Exec) W(a At) {
	if s, stage, micro, dy := x.backwardArgs(OpBackwardWeight, a); s != nil {
		if x.stepOK(OpBackwardWeight, stage, micro, x.stages[stage].BackwardWeight(s.saved, dy)) {
			if x.rec != nil {
				x.recycle(s, int(a>>16&atNone)) // the At's slot
			}
			x.release(s)
		}
	}
}

// stepOK reports whether err, the error of step k's stage call, is nil;
// else it fails the rank with it.
func (x *Exec) stepOK(k OpKind, stage, micro int, err error) bool {
	if err != nil {
		x.stepFail(k, stage, micro, -1, err)
		return false
	}
	return true
}

// inputGradDone records a chunk's input gradient dx, computed from dy.
func (s *slotState) inputGradDone(dy, dx *tensor.Dense) {
	s.dy, s.dx = dy, dx
	s.flags |= inDone
}

// release is weightDone, counting the saved context it lets go of.
func (x *Exec) release(s *slotState) {
	if s.saved != nil {
		x.mem.drop(chunkParts)
	}
	s.weightDone()
}

// weightDone records that the weight gradient of a chunk ran: it keeps
// only its input gradient, for SEND_B or the previous stage. B and W first
// hand its received tensors back to the transport (recycle) when it takes
// them; the check stays in the step, where it inlines.
func (s *slotState) weightDone() {
	s.flags |= wDone
	s.x, s.y, s.dy, s.saved = nil, nil, nil, nil
}

// backwardArgs runs the fast or the slow checks of B, I or W (k) at a and
// returns the slot holding the chunk, its stage and micro-batch and its
// output gradient; a nil slot when a check failed (reported) or the rank
// has failed. Each step's body follows it once, for both paths.
func (x *Exec) backwardArgs(k OpKind, a At) (s *slotState, stage, micro int, dy *tensor.Dense) {
	stage, micro, slot, src := a.Fields()
	st := x.state.Load()
	// A slot holding (stage, micro) proves both valid.
	if st == 0 && keyable(stage, micro) && uint(slot) < uint(len(x.slots)) {
		if p := &x.slots[slot]; p.key == keyOf(stage, micro) {
			switch {
			case k == OpBackwardWeight:
				if p.flags&(inDone|wDone|swappedOut) == inDone {
					return p, stage, micro, p.dy
				}
			case p.flags&(fwdDone|inDone|swappedOut) == fwdDone:
				if dy = x.readyGrad(p, src, stage, micro); dy != nil {
					p.rgrad = nil
					return p, stage, micro, dy
				}
			}
		}
	}
	if st&stFailed != 0 {
		return nil, 0, 0, nil
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, slot, src = a.Unpack()
	if k == OpBackwardWeight {
		if s = x.weightSlow(stage, micro, slot); s != nil {
			dy = s.dy
		}
	} else {
		s, dy = x.backwardSlow(k, stage, micro, slot, src)
	}
	return s, stage, micro, dy
}

// readyGrad returns the output gradient of the chunk (stage, micro) in p,
// between its F and its backward, when the backward can run on
// it now: dx of slot src (the next stage on this rank), the loss gradient
// (the last stage), or a completed receive, which the caller consumes
// (p.rgrad = nil: in the other two cases it is nil already). Nil when none
// is ready: the slow checks say why, or wait.
func (x *Exec) readyGrad(p *slotState, src, stage, micro int) (dy *tensor.Dense) {
	switch {
	case src != atNone:
		// Slot src holding (stage+1, micro) is not p's, which holds
		// (stage, micro); out of range, the slow checks report it.
		if uint(src) < uint(len(x.slots)) {
			if q := &x.slots[src]; q.key == keyOf(stage+1, micro) {
				dy = q.dx
			}
		}
	case x.ends[stage]&routeEnd != 0: // p holding the chunk proves stage valid
		dy = p.dy
	case p.flags&gradPending == 0:
		dy = p.rgrad
	}
	return dy
}

// backwardSlow runs the checks of B or I (k) and returns the slot holding
// the chunk and its output gradient (waiting for a pending receive); a nil
// slot when a check failed (reported).
func (x *Exec) backwardSlow(k OpKind, stage, micro, slot, src int) (*slotState, *tensor.Dense) {
	s := x.heldChunk(k, stage, micro, slot)
	if s == nil {
		return nil, nil
	}
	if s.flags&(fwdDone|inDone) != fwdDone {
		x.stepFailf(k, stage, micro, -1, "chunk in slot %d is not between its F and its backward (F ran: %v, backward ran: %v)", slot, s.flags&fwdDone != 0, s.flags&inDone != 0)
		return nil, nil
	}
	if s.flags&swappedOut != 0 {
		x.stepFailf(k, stage, micro, -1, "the chunk's saved activations are swapped out: %s must come first", stepName(OpSwapLaunchLoad, stage, micro))
		return nil, nil
	}
	var dy *tensor.Dense
	switch {
	case src >= 0:
		if dy = x.sourceSlot(k, stage, micro, slot, src, +1); dy == nil {
			return nil, nil
		}
	case x.routeLast(stage):
		dy = s.dy
	default:
		if s.flags&gradPending == 0 && s.rgrad == nil {
			x.stepFailf(k, stage, micro, -1, "no output gradient in slot %d: %s into it was not posted", slot, stepName(OpRecvB, stage, micro))
			return nil, nil
		}
		if !x.await(s, gradPending) {
			return nil, nil
		}
		dy, s.rgrad = s.rgrad, nil
	}
	return s, dy
}

// weightSlow runs the checks of W and returns the slot holding the chunk,
// or nil when a check failed (reported).
func (x *Exec) weightSlow(stage, micro, slot int) *slotState {
	const k = OpBackwardWeight
	s := x.heldChunk(k, stage, micro, slot)
	if s == nil {
		return nil
	}
	if s.flags&(inDone|wDone) != inDone {
		x.stepFailf(k, stage, micro, -1, "chunk in slot %d is not between its I and its W (I ran: %v, W ran: %v)", slot, s.flags&inDone != 0, s.flags&wDone != 0)
		return nil
	}
	if s.flags&swappedOut != 0 {
		x.stepFailf(k, stage, micro, -1, "the chunk's saved activations are swapped out: %s must come first", stepName(OpSwapLaunchLoad, stage, micro))
		return nil
	}
	return s
}

// OptStep runs the optimizer hook, if any; with two model copies
// (Spec.Copies = 2) it first sums their gradients (see CopyGrads).
//
//go:noinline
func (x *Exec) OptStep() {
	if x.failedNow() {
		return
	}
	if s := x.untied(); s >= 0 {
		x.stepFail(OpOptStep, 0, 0, -1, fmt.Errorf("stage %d is tied (Spec.Ties) but its TIE_GRAD has not run: the optimizer would step on one copy's gradient; TIE_GRAD %d comes before OPT_STEP", s, s))
		return
	}
	if x.tower != nil {
		if err := x.towerBackward(); err != nil {
			x.stepFail(OpOptStep, 0, 0, -1, fmt.Errorf("the tower (Config.Tower): %w", err))
			return
		}
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
