package pipe

import (
	"errors"
	"fmt"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/transport"
)

// Transfers: every send and receive of a step goes through one
// implementation, transfer, described by an xfer. A receive claims or holds
// the chunk's slot, marks it pending and posts the receive to the comm
// goroutine, whose completion the consuming step waits for; a send posts a
// tensor of the held chunk. Its At is (stage, micro, peer, slot).
//
//	RecvF  RECV_F          x of (stage, micro) from the rank of stage-1
//	SendF  SEND_F          y of (stage, micro) to the rank of stage+1
//	RecvB  RECV_B          dy of (stage, micro) from the rank of stage+1
//	SendB  SEND_B          dx of (stage, micro) to the rank of stage-1
//	RecvLabels DATA_RECV   labels from the rank of stage-1 (labels.go)
//	SendLabels DATA_SEND   labels to the rank of stage+1
//	RecvInput MPIPE_FWD_RECV  an owned micro-batch's input from its owner (mpipe.go)
//	SendInput MPIPE_FWD_SEND  the owner's loaded input to the first stage's rank

// peerRule is how a transfer's peer is checked.
type peerRule uint8

const (
	neighbour    peerRule = iota // the rank Spec.RankOf places stage+dir on, another rank
	fromOwner                    // the owner of the micro-batch (mpipe), another rank
	toFirstStage                 // the rank of stage, the first stage, from its owner: no slot
)

// which names one tensor of a slot.
type which uint8

const (
	none which = iota
	input
	output
	inputGrad
	labels
)

func (s *slotState) tensorOf(w which) *tensor.Dense {
	switch w {
	case input:
		return s.x
	case output:
		return s.y
	case inputGrad:
		return s.dx
	case labels:
		return s.target
	}
	return nil
}

// xfer describes one kind of transfer.
type xfer struct {
	kind  OpKind
	ch    abi.Channel
	recv  bool
	rule  peerRule
	dir   int  // the other stage is stage+dir (neighbour); the received tag's stage is stage+dir
	claim bool // a receive that may start the chunk in its slot (else the slot must hold it)
	// Receives: pend is the flag set while posted; the receive is refused
	// when the slot has a flag of used or a tensor has, with message used.
	pend slotFlags
	used slotFlags
	has  which
	// Sends: send is the tensor sent, after waiting for a pending receive
	// wait (the labels); missing is the message when it is nil, with the
	// slot, stage and micro as arguments.
	send    which
	wait    slotFlags
	message string
	// batch is set only in a batch's header entry (batch.go).
	batch *opBatch
}

var (
	recvAct = xfer{kind: OpRecvF, ch: abi.ActChannel, recv: true, dir: -1, claim: true,
		pend: actPending, used: actPending | fwdDone, message: "input of the chunk already received or used"}
	sendAct = xfer{kind: OpSendF, ch: abi.ActChannel, dir: +1,
		send: output, message: "no output in slot %d: %[2]dF%[3]d has not run"}
	recvGrad = xfer{kind: OpRecvB, ch: abi.GradChannel, recv: true, dir: +1,
		pend: gradPending, used: gradPending | inDone, message: "output gradient of the chunk already received or used"}
	sendGrad = xfer{kind: OpSendB, ch: abi.GradChannel, dir: -1,
		send: inputGrad, message: "no input gradient in slot %d: %[2]dB%[3]d or %[2]dI%[3]d has not run"}
	recvData = xfer{kind: OpDataRecv, ch: abi.DataChannel, recv: true, dir: -1, claim: true,
		pend: dataPending, used: dataPending | fwdDone, has: labels, message: "the chunk's labels are already received, loaded or used"}
	sendData = xfer{kind: OpDataSend, ch: abi.DataChannel, dir: +1, send: labels, wait: dataPending,
		message: "no labels in slot %d: %[2]dDATA_LOAD%[3]d (with Spec.ShipLabels, on the first stage) or %[2]dDATA_RECV%[3]d must come first"}
	recvInput = xfer{kind: OpMpipeRecv, ch: abi.DataChannel, recv: true, rule: fromOwner, claim: true,
		pend: actPending, used: actPending | fwdDone, has: input, message: "input of the chunk already loaded, received or used"}
	sendInput = xfer{kind: OpMpipeSend, ch: abi.DataChannel, rule: toFirstStage}
)

// RecvF posts the receive of x of (stage, micro) from peer into slot.
//
//go:noinline
func (x *Exec) RecvF(a At) { x.transfer(&recvAct, a) }

// SendF posts the send of y of (stage, micro) in slot to peer.
//
//go:noinline
func (x *Exec) SendF(a At) { x.transfer(&sendAct, a) }

// RecvB posts the receive of dy of (stage, micro) from peer into slot.
//
//go:noinline
func (x *Exec) RecvB(a At) { x.transfer(&recvGrad, a) }

// SendB posts the send of dx of (stage, micro) in slot to peer.
//
//go:noinline
func (x *Exec) SendB(a At) { x.transfer(&sendGrad, a) }

// DataRecv posts the receive of the labels of (stage, micro) from peer, the
// rank of stage-1, into slot (DATA_RECV).
//
//go:noinline
func (x *Exec) DataRecv(a At) { x.transfer(&recvData, a) }

// DataSend posts the send of the labels of (stage, micro) in slot to peer,
// the rank of stage+1 (DATA_SEND).
//
//go:noinline
func (x *Exec) DataSend(a At) { x.transfer(&sendData, a) }

// MpipeRecv runs MPIPE_FWD_RECV(stage, micro) on the first stage's rank: it
// posts the receive of micro's input from its owner (peer) into slot. The
// F of the chunk waits for it. The At is (stage, micro, peer, slot).
//
//go:noinline
func (x *Exec) MpipeRecv(a At) { x.transfer(&recvInput, a) }

// MpipeSend runs MPIPE_FWD_SEND(stage, micro) on micro's owner: it posts
// the send of the input its DATA_LOAD took to peer, the rank of stage (the
// first stage), on the data channel. The At is (stage, micro, peer, -1).
//
//go:noinline
func (x *Exec) MpipeSend(a At) { x.transfer(&sendInput, a) }

// transfer runs the transfer t with arguments a: the fast path when every
// check passes at once (the neighbour transfers), else transferSlow.
func (x *Exec) transfer(t *xfer, a At) {
	stage, micro, peer, slot := a.Fields()
	st := x.state.Load()
	if st&stFailed != 0 {
		return
	}
	peers := x.prevPeer
	if t.dir > 0 {
		peers = x.nextPeer
	}
	if st == 0 && t.rule == neighbour && keyable(stage, micro) && uint(slot) < uint(len(x.slots)) && uint(stage) < uint(len(peers)) &&
		peer >= 0 && peers[stage] == peer {
		// Held: the key proves stage and micro valid; else a receive may
		// claim the slot when the stage is on this rank, micro in range and
		// no receive pending for the old chunk.
		s := &x.slots[slot]
		k := keyOf(stage, micro)
		held := s.key == k
		switch {
		case t.recv && held && s.flags&t.used == 0 && s.tensorOf(t.has) == nil,
			t.recv && !held && t.claim && s.flags&pending == 0 && x.stages[stage] != nil && uint(micro) < uint(x.micro) && x.onRoute(stage, micro):
			if !held {
				s.start(k)
			}
			s.flags |= t.pend
			x.post(commOp{x: t, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot)})
			return
		case !t.recv && held && s.flags&t.wait == 0:
			if v := s.tensorOf(t.send); v != nil {
				x.post(commOp{x: t, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot), t: v})
				return
			}
		}
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, peer, slot = a.Unpack()
	x.transferSlow(t, stage, micro, peer, slot)
}

// transferSlow runs the checks of t one by one, reports the first that
// fails, or posts the transfer.
func (x *Exec) transferSlow(t *xfer, stage, micro, peer, slot int) {
	k := t.kind
	if t.rule == toFirstStage {
		x.sendOwned(stage, micro, peer, slot)
		return
	}
	if !x.valid(stage, micro, slot) {
		x.badArgs(k, stage, micro, slot, peer)
		return
	}
	if t.rule == fromOwner {
		if !x.checkOwner(stage, micro, peer) {
			return
		}
	} else if !x.checkPeer(k, stage, micro, peer, stage+t.dir) {
		return
	}
	s := &x.slots[slot]
	if t.claim {
		if !x.claim(k, s, slot, stage, micro, peer) {
			return
		}
	} else if !s.holds(stage, micro) {
		x.notHeld(k, s, slot, stage, micro, peer)
		return
	}
	op := commOp{x: t, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot)}
	if t.recv {
		if s.flags&t.used != 0 || s.tensorOf(t.has) != nil {
			x.stepFailf(k, stage, micro, peer, "%s", t.message)
			return
		}
		s.flags |= t.pend
		x.post(op)
		return
	}
	if s.flags&t.wait != 0 && !x.takeLabels(s) {
		return
	}
	if op.t = s.tensorOf(t.send); op.t == nil {
		x.stepFailf(k, stage, micro, peer, t.message, slot, stage, micro)
		return
	}
	x.post(op)
}

// checkPeer verifies a transfer's peer against the placement: other is the
// stage on the other end.
func (x *Exec) checkPeer(k OpKind, stage, micro, peer, other int) bool {
	if x.tr == nil {
		x.stepFailf(k, stage, micro, peer, "no transport")
		return false
	}
	if other < 0 || other > x.last || (other < stage && x.routeFirst(stage)) || (other > stage && x.routeLast(stage)) {
		x.stepFailf(k, stage, micro, peer, "stage %d has no neighbour stage %d", stage, other)
		return false
	}
	if want := x.spec.RankOf[other]; peer != want || peer == x.rank {
		x.stepFailf(k, stage, micro, peer, "peer rank %d, but stage %d is on rank %d", peer, other, want)
		return false
	}
	return true
}

// await waits for the completion of the receive pending on s under flag
// (actPending, gradPending or dataPending), if there is one, and clears the
// flag; false when the rank has failed.
func (x *Exec) await(s *slotState, flag slotFlags) bool {
	if s.flags&flag != 0 {
		if x.batch != nil {
			// Its receive may be in the open batch, posted only at BATCH_END.
			x.fail(&StepError{Rank: x.rank, Peer: -1, Err: errors.New("a step inside BATCH_BEGIN .. BATCH_END waits for a receive; a batch holds only transfers (BATCH_END first)")})
			return false
		}
		switch flag {
		case actPending:
			<-s.actDone
		case gradPending:
			<-s.gradDone
		default:
			<-s.dataDone
		}
		s.flags &^= flag
	}
	return !x.failedNow()
}

// commOp is one posted transfer.
type commOp struct {
	x            *xfer
	peer         int32
	stage, micro int32
	slot         int32
	t            *tensor.Dense // sends: the tensor captured at post time
}

// post hands a transfer to the comm goroutine.
func (x *Exec) post(op commOp) bool {
	if x.closed {
		x.stepFail(op.x.kind, int(op.stage), int(op.micro), int(op.peer), ErrClosed)
		return false
	}
	if x.batch != nil && op.x.batch == nil {
		x.batch.ops = append(x.batch.ops, op) // posted at BatchEnd
		return true
	}
	x.inflight.Add(1)
	x.comm <- op
	return true
}

// commLoop is the rank's comm stream: it runs posted transfers one at a time
// in program order.
func (x *Exec) commLoop() {
	defer close(x.commDone)
	for op := range x.comm {
		if b := op.x.batch; b != nil {
			x.runBatch(b)
		} else {
			x.runComm(&op)
		}
		x.inflight.Done()
	}
}

func (x *Exec) runComm(op *commOp) {
	if x.tl != nil {
		start := time.Now()
		if n := x.transferNow(op); n >= 0 {
			x.tl.addTransfer(x.rank, op, n, start)
		}
		return
	}
	x.transferNow(op)
}

// transferNow runs one transfer and returns the bytes of the tensor it
// moved, read before the peer or the receiving step may own it (-1 when
// it failed).
func (x *Exec) transferNow(op *commOp) int {
	t := op.x
	if !t.recv {
		if x.failedNow() {
			return -1
		}
		n := 0
		if x.tl != nil {
			n = payload(op.t)
		}
		if err := x.tr.Send(int(op.peer), t.ch, transport.Tag{Stage: op.stage, Micro: op.micro}, op.t); err != nil {
			x.stepFail(t.kind, int(op.stage), int(op.micro), int(op.peer), err)
			return -1
		}
		return n
	}
	var got *tensor.Dense
	n := -1
	if !x.failedNow() {
		tag, v, err := x.tr.Recv(int(op.peer), t.ch)
		if err == nil {
			err = op.checkTag(tag)
		}
		if err != nil {
			x.stepFail(t.kind, int(op.stage), int(op.micro), int(op.peer), err)
		} else {
			got, n = v, 0
			if x.tl != nil {
				n = payload(v)
			}
		}
	}
	x.deliver(op, got)
	return n
}

// payload is the size of t's data in bytes (0 for none).
func payload(t *tensor.Dense) int {
	if t == nil {
		return 0
	}
	return t.DataSize() * int(t.Dtype().Size())
}

// checkTag checks the tag of what the receive op got: the sending step's
// (stage, micro).
func (op *commOp) checkTag(tag transport.Tag) error {
	if want := (transport.Tag{Stage: op.stage + int32(op.x.dir), Micro: op.micro}); tag != want {
		return fmt.Errorf("received the %s of stage %d micro %d, expected stage %d micro %d (ranks run different schedules?)",
			op.x.ch, tag.Stage, tag.Micro, want.Stage, want.Micro)
	}
	return nil
}

// deliver completes the receive op with got (nil when it failed): the
// tensor goes to its slot, lent (recycle) when it is an input or a
// gradient, and the consuming step's wait ends.
func (x *Exec) deliver(op *commOp, got *tensor.Dense) {
	s := &x.slots[op.slot]
	switch op.x.pend {
	case dataPending:
		s.rdata = got
		s.dataDone <- struct{}{}
	case actPending:
		s.ract = got
		x.lend(op, lentInput, got)
		s.actDone <- struct{}{}
	default:
		s.rgrad = got
		x.lend(op, lentGrad, got)
		s.gradDone <- struct{}{}
	}
}

// Received tensors go back to the transport when their chunk is done with
// them (docs/internals.md, "Receive buffers"): a chunk's received input x
// and output gradient dy at the end of its backward (B, or the W after its
// I), where the slot drops x, y, dy and the saved context. Stage's rule
// makes that safe: a stage keeps neither after the chunk's backward. A
// stage may return them, or views of them, as its output y or input
// gradient dx (an identity layer does), and those live on (sent, or taken
// by a colocated stage); so a received tensor whose memory y, dx or dy
// shares is never recycled, nor one the slot still holds unconsumed. Labels
// (DATA_RECV) are not recycled.

// lentRecv is a received tensor and the chunk (keyOf) that received it.
type lentRecv struct {
	key uint64
	t   *tensor.Dense
}

// The two received tensors of a slot's chunk, x.lent[2*slot+w].
const (
	lentInput = 0 // RECV_F, MPIPE_FWD_RECV (actPending)
	lentGrad  = 1 // RECV_B (gradPending)
)

// lend records the tensor got that op received (on the comm goroutine,
// before signalling the receive's completion, which the host waits for
// before recycle reads it).
func (x *Exec) lend(op *commOp, w int, got *tensor.Dense) {
	if x.rec != nil && got != nil {
		x.lent[2*int(op.slot)+w] = lentRecv{keyOf(int(op.stage), int(op.micro)), got}
	}
}

// recycle hands the received input and output gradient of the chunk in s
// (slot) back to the transport at the end of its backward, on the host
// thread. A receive whose pending flag is still set is in flight (an odd
// program): its entry is the comm goroutine's, left alone. The caller
// checked x.rec != nil.
func (x *Exec) recycle(s *slotState, slot int) {
	for w, flag := range [2]slotFlags{actPending, gradPending} {
		e := &x.lent[2*slot+w]
		if s.flags&flag != 0 || e.t == nil {
			continue
		}
		v, key := e.t, e.key
		*e = lentRecv{}
		if key != s.key || v == s.ract || v == s.rgrad || shares(v, s.y) || shares(v, s.dx) || (w == lentInput && shares(v, s.dy)) {
			continue
		}
		x.rec.Recycle(v)
	}
}

// shares reports whether the backing arrays of a and b overlap.
func shares(a, b *tensor.Dense) bool {
	if a == nil || b == nil || a.MemSize() == 0 || b.MemSize() == 0 {
		return false
	}
	pa, pb := a.Uintptr(), b.Uintptr()
	return pa < pb+b.MemSize() && pb < pa+a.MemSize()
}
