package pipe

import (
	"github.com/ppgen/ppgen/runtime/transport"
	"gorgonia.org/tensor"
)

// mpipe's owned-micro data loading (Spec.Owned > 0): micro m < Owned is owned
// by rank m mod Ranks. An owner that does not hold the first stage runs
//
//	x.Load(At(0, m, none, none))  // DATA_LOAD: DataSource.Input(m), held by the Exec
//	x.SendInput(At(0, m, peer, none)) // MPIPE_FWD_SEND: ship it to stage 0's rank
//
// and the first stage's rank posts x.RecvInput(At(0, m, owner, slot))
// (MPIPE_FWD_RECV) into the chunk's slot; F(0, m) waits for it and takes it
// as its input, as it would a loaded one. Owner steps are rare (at most one
// per rank and iteration), so they take the checked path only.

// owner returns the owner rank of micro m, or -1 when m is not owned.
func (x *Exec) owner(m int) int {
	if m < 0 || m >= x.spec.Owned {
		return -1
	}
	return m % x.spec.Ranks
}

// ownerLoad runs DATA_LOAD(stage, micro) of an owned micro on its owner,
// which does not hold stage: the input waits in the Exec for SendInput.
// It reports false when the step is not an owner load (the caller reports).
func (x *Exec) ownerLoad(stage, micro, slot int) bool {
	if slot != -1 || uint(stage) >= uint(len(x.stages)) || x.stages[stage] != nil || !x.routeFirst(stage) || x.owner(micro) != x.rank {
		return false
	}
	if x.ownIn != nil {
		x.stepFailf(OpDataLoad, stage, micro, -1, "the input of micro %d is loaded and not yet sent (MPIPE_FWD_SEND of it must come first)", x.ownMicro)
		return true
	}
	if x.data == nil {
		x.stepFailf(OpDataLoad, stage, micro, -1, "rank %d owns micro %d (mpipe) but Config.Data is nil: an owner loads the input of the micro-batches it owns", x.rank, micro)
		return true
	}
	in, err := x.data.Input(micro)
	if err != nil || in == nil {
		x.dataFail(stage, micro, err, "input")
		return true
	}
	x.ownIn, x.ownMicro = in, micro
	return true
}

// SendInput runs MPIPE_FWD_SEND(stage, micro) on micro's owner: it posts
// the send of the input its DATA_LOAD took to peer, the rank of stage (the
// first stage), on the data channel. The At is (stage, micro, peer, -1).
//
//go:noinline
func (x *Exec) SendInput(a At) {
	if x.failed.Load() {
		return
	}
	stage, micro, peer, slot := a.Unpack()
	if slot != -1 {
		x.stepFailf(OpSendInput, stage, micro, peer, "slot %d: an owner's send of another rank's input has no slot (0xffff)", slot)
		return
	}
	x.sendInput(stage, micro, peer)
}

// MpipeSend is SendInput with its arguments unpacked (stage, micro, peer,
// slot), in the shape of the other transfers; slot must be -1 (the owner
// holds no slot of the stage).
func (x *Exec) MpipeSend(stage, micro, peer, slot int) {
	if x.failed.Load() {
		return
	}
	if slot != -1 {
		x.stepFailf(OpSendInput, stage, micro, peer, "slot %d: an owner's send of another rank's input has no slot (-1)", slot)
		return
	}
	x.sendInput(stage, micro, peer)
}

func (x *Exec) sendInput(stage, micro, peer int) {
	const k = OpSendInput
	switch {
	case uint(stage) >= uint(len(x.stages)) || !x.routeFirst(stage):
		x.stepFailf(k, stage, micro, peer, "stage %d does not begin the micro-batches' route: only the first stage takes an owner's input", stage)
	case x.owner(micro) != x.rank:
		x.stepFailf(k, stage, micro, peer, "rank %d does not own micro %d (Spec.Owned = %d: micro m < Owned is owned by rank m mod %d)", x.rank, micro, x.spec.Owned, x.spec.Ranks)
	case x.tr == nil:
		x.stepFailf(k, stage, micro, peer, "no transport")
	case peer != x.spec.RankOf[stage] || peer == x.rank:
		x.stepFailf(k, stage, micro, peer, "peer rank %d, but stage %d is on rank %d", peer, stage, x.spec.RankOf[stage])
	case x.ownIn == nil || x.ownMicro != micro:
		x.stepFailf(k, stage, micro, peer, "the input of micro %d is not loaded: DATA_LOAD(%d, %d) must come first on this rank", micro, stage, micro)
	default:
		t := x.ownIn
		x.ownIn = nil
		x.post(commOp{ch: transport.Data, kind: k, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: -1, t: t})
	}
}

// RecvInput runs MPIPE_FWD_RECV(stage, micro) on the first stage's rank: it
// posts the receive of micro's input from its owner (peer) into slot. The
// F of the chunk waits for it. The At is (stage, micro, peer, slot).
//
//go:noinline
func (x *Exec) RecvInput(a At) {
	if x.failed.Load() {
		return
	}
	stage, micro, peer, slot := a.Unpack()
	x.recvInput(stage, micro, peer, slot)
}

// MpipeRecv is RecvInput with its arguments unpacked (stage, micro, peer, slot).
func (x *Exec) MpipeRecv(stage, micro, peer, slot int) {
	if x.failed.Load() {
		return
	}
	x.recvInput(stage, micro, peer, slot)
}

func (x *Exec) recvInput(stage, micro, peer, slot int) {
	const k = OpRecvInput
	if !x.valid(stage, micro, slot) {
		x.badArgs(k, stage, micro, slot, peer)
		return
	}
	switch o := x.owner(micro); {
	case !x.routeFirst(stage):
		x.stepFailf(k, stage, micro, peer, "stage %d does not begin the micro-batches' route: only the first stage takes an owner's input", stage)
		return
	case o < 0:
		x.stepFailf(k, stage, micro, peer, "micro %d is not owned (Spec.Owned = %d): the first stage's rank loads it", micro, x.spec.Owned)
		return
	case o == x.rank:
		x.stepFailf(k, stage, micro, peer, "this rank owns micro %d: it loads it with DATA_LOAD", micro)
		return
	case peer != o:
		x.stepFailf(k, stage, micro, peer, "peer rank %d, but micro %d is owned by rank %d", peer, micro, o)
		return
	case x.tr == nil:
		x.stepFailf(k, stage, micro, peer, "no transport")
		return
	}
	s := &x.slots[slot]
	if !x.claim(k, s, slot, stage, micro, peer) {
		return
	}
	if s.flags&(actPending|fwdDone) != 0 || s.x != nil {
		x.stepFailf(k, stage, micro, peer, "input of the chunk already loaded, received or used")
		return
	}
	s.flags |= actPending
	x.post(commOp{recv: true, ch: transport.Data, kind: k, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot)})
}

// takeInput returns the input of the first-stage chunk in s for its F: the
// loaded one, or a received one (waiting for a pending receive). It returns
// nil when there is neither; the caller reports.
func (x *Exec) takeInput(s *slotState) *tensor.Dense {
	if s.x != nil {
		return s.x
	}
	if s.flags&actPending != 0 {
		<-s.actDone
		s.flags &^= actPending
		if x.failed.Load() {
			return nil
		}
	}
	in := s.ract
	s.ract = nil
	return in
}
