package pipe

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"
)

// The buffer slots of a rank and the checks every step runs on its
// arguments: is the stage on this rank, the micro-batch on its route, the
// slot held by the chunk.

// slotState is one buffer slot: the state of the chunk (stage, micro) it
// currently holds. The fields the step fast paths test come first (key,
// flags), then the chunk's tensors, then the receive hand-off with the comm
// goroutine.
type slotState struct {
	// key is keyOf(stage, micro) of the chunk the slot holds, 0 when it
	// holds none, so that one comparison checks "live and holds (stage,
	// micro)". Only a claim sets it, after checking that stage is on this
	// rank and micro in range: a slot whose key matches names a valid chunk.
	key   uint64
	flags slotFlags // host-only, like key

	// x is the loaded input until the chunk's F, which lets go of it (the
	// stage keeps what its backward needs in saved); y the output, kept
	// for SEND_F and a colocated next stage; dy, dx the gradients; saved
	// the stage's context (a Swapper's handle while swapped out).
	x, y, dy, dx, target *tensor.Dense
	saved                any

	// Receives: the host sets actPending/gradPending when posting and clears
	// it once it has waited; the comm goroutine stores the tensor in
	// ract/rgrad and then signals *Done (capacity 1, reused).
	ract, rgrad       *tensor.Dense
	actDone, gradDone chan struct{}
	// rdata/dataDone: the same for a DATA_RECV of the chunk's labels
	// (Spec.ShipLabels), flagged dataPending.
	rdata    *tensor.Dense
	dataDone chan struct{}

	_ [8]byte // to 128 bytes: slot addresses by shift, no multiply
}

// slotFlags is a slot's chunk progress.
type slotFlags uint8

const (
	fwdDone     slotFlags = 1 << iota // F ran
	inDone                            // I or B ran (dx valid)
	wDone                             // W or B ran
	actPending                        // a RECV_F is posted and not yet waited for
	gradPending                       // a RECV_B is posted and not yet waited for
	swappedOut                        // the saved context is offloaded (a Swapper's handle)
	dataPending                       // a DATA_RECV of the labels is posted and not yet waited for
	keptShare                         // saved holds what a Recomputable's Drop kept until RECOMPUTE

	pending = actPending | gradPending | dataPending
)

// liveKey marks a chunk key; stage and micro take bits 32..62 and 0..30.
const liveKey = 1 << 63

// keyable reports whether keyOf(stage, micro) is exact (one-to-one): both
// are in [0, 2^31). New rejects Specs with more stages or micro-batches, so
// every valid chunk, and stage+1 of every valid stage, is keyable.
func keyable(stage, micro int) bool { return uint64(stage)|uint64(micro) < 1<<31 }

// keyOf packs a keyable (stage, micro) into a slot key.
func keyOf(stage, micro int) uint64 { return liveKey | uint64(stage)<<32 | uint64(micro) }

func (s *slotState) live() bool { return s.key != 0 }
func (s *slotState) stage() int { return int(s.key>>32) & math.MaxInt32 }
func (s *slotState) micro() int { return int(s.key) & math.MaxInt32 }

// start makes the slot hold the chunk of key k, empty.
func (s *slotState) start(k uint64) {
	s.key, s.flags = k, 0
	s.x, s.y, s.dy, s.dx, s.target, s.saved = nil, nil, nil, nil, nil, nil
	s.ract, s.rgrad, s.rdata = nil, nil, nil
}

func (s *slotState) clearChunk() { s.start(0) }

func (s *slotState) holds(stage, micro int) bool {
	return keyable(stage, micro) && s.key == keyOf(stage, micro)
}

// slot of this rank. It is the hot-path check; badArgs explains a failure.
func (x *Exec) valid(stage, micro, slot int) bool {
	return uint(stage) < uint(len(x.stages)) && x.stages[stage] != nil &&
		uint(micro) < uint(x.micro) && uint(slot) < uint(len(x.slots)) && x.onRoute(stage, micro)
}

// The bits of Exec.ends.
const (
	routeStart  uint8 = 1 << iota // the stage begins its micro-batches' route
	routeEnd                      // the stage ends it (computes their loss)
	loadsLabels                   // its DATA_LOAD loads the labels: routeEnd, or routeStart with Spec.ShipLabels
	keepsInput                    // its F keeps only the input, which a rebuild step (abi's IsRebuild: RECOMPUTE) runs again
)

// routeFirst reports whether stage begins micro-batches' route: stage 0,
// or the first stage of a model copy. Any int is allowed.
func (x *Exec) routeFirst(stage int) bool {
	return uint(stage) < uint(len(x.ends)) && x.ends[stage]&routeStart != 0
}

// routeLast reports whether stage ends micro-batches' route (it computes
// their loss): the last stage, or the last stage of a model copy.
func (x *Exec) routeLast(stage int) bool {
	return uint(stage) < uint(len(x.ends)) && x.ends[stage]&routeEnd != 0
}

// onRoute reports whether micro-batch micro runs stage (always, for one
// pipeline). Both must be in range.
func (x *Exec) onRoute(stage, micro int) bool {
	return x.copies <= 1 || stage/x.per == micro/(x.micro/x.copies)
}

func (x *Exec) badArgs(k OpKind, stage, micro, slot, peer int) {
	var err error
	switch {
	case stage < 0 || stage >= len(x.stages):
		err = fmt.Errorf("stage %d outside [0, %d)", stage, len(x.stages))
	case x.stages[stage] == nil:
		err = fmt.Errorf("stage %d is on rank %d, not on this rank", stage, x.spec.RankOf[stage])
	case micro < 0 || micro >= x.micro:
		err = fmt.Errorf("micro-batch %d outside [0, %d)", micro, x.micro)
	case !x.onRoute(stage, micro):
		k := micro / (x.micro / x.copies)
		err = fmt.Errorf("micro-batch %d runs model copy %d (stages %d-%d), not stage %d", micro, k, k*x.per, (k+1)*x.per-1, stage)
	default:
		err = fmt.Errorf("slot %d outside [0, %d)", slot, len(x.slots))
	}
	x.stepFail(k, stage, micro, peer, err)
}

// claim makes slot s hold chunk (stage, micro), starting the chunk if the
// slot held another one.
// The caller has checked valid(stage, micro, slot).
func (x *Exec) claim(k OpKind, s *slotState, slot int, stage, micro int, peer int) bool {
	if s.holds(stage, micro) {
		return true
	}
	if s.flags&pending != 0 {
		x.stepFailf(k, stage, micro, peer, "slot %d still has a pending receive for chunk (stage %d, micro %d)", slot, s.stage(), s.micro())
		return false
	}
	s.start(keyOf(stage, micro))
	return true
}

func (x *Exec) notHeld(k OpKind, s *slotState, slot, stage, micro, peer int) {
	if !s.live() {
		x.stepFailf(k, stage, micro, peer, "slot %d holds no chunk (the chunk's first step did not run or used another slot)", slot)
		return
	}
	x.stepFailf(k, stage, micro, peer, "slot %d holds chunk (stage %d, micro %d)", slot, s.stage(), s.micro())
}

// heldChunk returns the slot holding chunk (stage, micro) for step k of
// this rank (no peer), or nil after reporting why there is none: arguments
// no valid step has, or a slot holding another chunk (or none).
func (x *Exec) heldChunk(k OpKind, stage, micro, slot int) *slotState {
	if !x.valid(stage, micro, slot) {
		x.badArgs(k, stage, micro, slot, -1)
		return nil
	}
	s := &x.slots[slot]
	if !s.holds(stage, micro) {
		x.notHeld(k, s, slot, stage, micro, -1)
		return nil
	}
	return s
}
