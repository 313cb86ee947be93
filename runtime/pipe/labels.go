package pipe

import "github.com/ppgen/ppgen/runtime/transport"

// Labels along the pipe (Spec.ShipLabels): the first stage's DATA_LOAD
// loads a micro-batch's labels with its input, and every rank passes them
// on ahead of the chunk's activation,
//
//	x.RecvLabels(At(s, m, peer, slot)) // DATA_RECV: before RECV_F(s, m), into the chunk's slot
//	x.SendLabels(At(s, m, peer, slot)) // DATA_SEND: before SEND_F(s, m), from the chunk's slot
//
// on the data channel. The last stage's F waits for them (the loss). A
// RecvLabels completes before the RECV_F posted after it (the comm stream
// runs in order), so a SendLabels after the chunk's F never waits. These
// steps come once per hop, like the transfers they go with, but cost only a
// small tensor each; they take the checked path.

// RecvLabels posts the receive of the labels of (stage, micro) from peer, the
// rank of stage-1, into slot.
//
//go:noinline
func (x *Exec) RecvLabels(a At) {
	if x.failed.Load() {
		return
	}
	stage, micro, peer, slot := a.Unpack()
	x.recvLabels(stage, micro, peer, slot)
}

// RecvData is RecvLabels with its arguments unpacked (stage, micro, peer, slot).
func (x *Exec) RecvData(stage, micro, peer, slot int) {
	if x.failed.Load() {
		return
	}
	x.recvLabels(stage, micro, peer, slot)
}

func (x *Exec) recvLabels(stage, micro, peer, slot int) {
	const k = OpRecvData
	if !x.valid(stage, micro, slot) {
		x.badArgs(k, stage, micro, slot, peer)
		return
	}
	if !x.checkPeer(k, stage, micro, peer, stage-1) {
		return
	}
	s := &x.slots[slot]
	if !x.claim(k, s, slot, stage, micro, peer) {
		return
	}
	if s.flags&(dataPending|fwdDone) != 0 || s.target != nil {
		x.stepFailf(k, stage, micro, peer, "the chunk's labels are already received, loaded or used")
		return
	}
	s.flags |= dataPending
	x.post(commOp{recv: true, ch: transport.Data, kind: k, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot)})
}

// SendLabels posts the send of the labels of (stage, micro) in slot to peer,
// the rank of stage+1.
//
//go:noinline
func (x *Exec) SendLabels(a At) {
	if x.failed.Load() {
		return
	}
	stage, micro, peer, slot := a.Unpack()
	x.sendLabels(stage, micro, peer, slot)
}

// SendData is SendLabels with its arguments unpacked (stage, micro, peer, slot).
func (x *Exec) SendData(stage, micro, peer, slot int) {
	if x.failed.Load() {
		return
	}
	x.sendLabels(stage, micro, peer, slot)
}

func (x *Exec) sendLabels(stage, micro, peer, slot int) {
	const k = OpSendData
	if !x.valid(stage, micro, slot) {
		x.badArgs(k, stage, micro, slot, peer)
		return
	}
	if !x.checkPeer(k, stage, micro, peer, stage+1) {
		return
	}
	s := &x.slots[slot]
	if !s.holds(stage, micro) {
		x.notHeld(k, s, slot, stage, micro, peer)
		return
	}
	if s.flags&dataPending != 0 && !x.takeLabels(s) {
		return
	}
	if s.target == nil {
		x.stepFailf(k, stage, micro, peer, "no labels in slot %d: DATA_LOAD (with Spec.ShipLabels, on the first stage) or DATA_RECV of (%d, %d) must come first", slot, stage, micro)
		return
	}
	x.post(commOp{ch: transport.Data, kind: k, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot), t: s.target})
}

// takeLabels waits for the pending receive of the labels of the chunk in s
// and keeps them; false when the rank has failed meanwhile.
func (x *Exec) takeLabels(s *slotState) bool {
	<-s.dataDone
	s.flags &^= dataPending
	s.target, s.rdata = s.rdata, nil
	return !x.failed.Load()
}
