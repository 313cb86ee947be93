package pipe

// Swapper is implemented by stages that can move a chunk's saved context
// (what Forward returned for the backward steps) off the working memory
// and back: Offload returns a handle that stands for saved until Load
// returns saved from it. A schedule lowered with swap steps (`ppgen gen
// -swap N`) calls Offload at SWAP_LAUNCH_OFFLOAD of a chunk and Load at its
// SWAP_LAUNCH_LOAD, on the host thread; the WAIT steps mark where the
// schedule needs the transfer finished (a stage that moves data
// asynchronously waits for it at SWAP_WAIT_OFFLOAD if it is a SwapWaiter,
// and in its next call on the handle in any case). ppgen's verifier proves
// that no backward of the chunk runs while it is out. For a stage that does
// not implement Swapper the four steps do nothing.
type Swapper interface {
	Offload(saved any) (handle any, err error)
	Load(handle any) (saved any, err error)
}

// SwapWaiter is implemented by Swappers whose Offload returns before the
// data is out. SWAP_WAIT_OFFLOAD calls WaitOffload with the chunk's handle:
// it returns once the saved context has left the working set, or the
// error of the move. From there on the verifier's memory count takes the
// chunk as out, so a stage whose resident memory must stay within the
// verified peak implements it (runtime/nn's WithSwap does).
type SwapWaiter interface {
	WaitOffload(handle any) error
}

// SwapLaunchOffload runs SWAP_LAUNCH_OFFLOAD of the chunk a names (stage,
// micro, slot, -1): Swapper.Offload of its saved context.
//
//go:noinline
func (x *Exec) SwapLaunchOffload(a At) { x.swapStep(OpSwapLaunchOffload, a) }

// SwapWaitOffload runs SWAP_WAIT_OFFLOAD: it checks that the chunk is out and,
// for a SwapWaiter stage, waits for its offload to end.
//
//go:noinline
func (x *Exec) SwapWaitOffload(a At) { x.swapStep(OpSwapWaitOffload, a) }

// SwapLaunchLoad runs SWAP_LAUNCH_LOAD: Swapper.Load of the chunk's handle.
//
//go:noinline
func (x *Exec) SwapLaunchLoad(a At) { x.swapStep(OpSwapLaunchLoad, a) }

// SwapWaitLoad runs SWAP_WAIT_LOAD: it checks that the chunk is back.
//
//go:noinline
func (x *Exec) SwapWaitLoad(a At) { x.swapStep(OpSwapWaitLoad, a) }

// swapStep runs one swap step. Swap steps are rare (four per swapped
// chunk), so they take the checked path only.
func (x *Exec) swapStep(k OpKind, a At) {
	if x.failedNow() {
		return
	}
	stage, micro, slot, _ := a.Unpack()
	s := x.heldChunk(k, stage, micro, slot)
	if s == nil {
		return
	}
	sw, ok := x.raw[stage].(Swapper)
	if !ok {
		return
	}
	out := s.flags&swappedOut != 0
	switch k {
	case OpSwapLaunchOffload:
		if s.flags&(fwdDone|wDone) != fwdDone || out {
			x.stepFailf(k, stage, micro, -1, "the chunk in slot %d has no saved activations to offload (F ran: %v, finished: %v, out: %v)", slot, s.flags&fwdDone != 0, s.flags&wDone != 0, out)
			return
		}
		h, err := sw.Offload(s.saved)
		if err != nil {
			x.stepFail(k, stage, micro, -1, err)
			return
		}
		s.saved = h
		s.flags |= swappedOut
	case OpSwapLaunchLoad:
		if !out {
			x.stepFailf(k, stage, micro, -1, "the chunk in slot %d is not swapped out: %s must come first", slot, stepName(OpSwapLaunchOffload, stage, micro))
			return
		}
		saved, err := sw.Load(s.saved)
		if err != nil {
			x.stepFail(k, stage, micro, -1, err)
			return
		}
		s.saved = saved
		s.flags &^= swappedOut
	case OpSwapWaitOffload:
		if !out {
			x.stepFailf(k, stage, micro, -1, "the chunk in slot %d is not being swapped out", slot)
			return
		}
		if w, ok := sw.(SwapWaiter); ok {
			if err := w.WaitOffload(s.saved); err != nil {
				x.stepFail(k, stage, micro, -1, err)
			}
		}
	case OpSwapWaitLoad:
		if out {
			x.stepFailf(k, stage, micro, -1, "the chunk in slot %d is still swapped out: %s must come first", slot, stepName(OpSwapLaunchLoad, stage, micro))
		}
	}
}
