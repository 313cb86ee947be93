package pipe

import (
	"errors"
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/transport"
)

// Batches of transfers (BATCH_BEGIN .. BATCH_END, the coalesce pass of
// gen/passes; docs/internals.md "Batches"):
//
//	x.BatchBegin()
//	x.SendF(0x0001_0003_0002_0001)    // 1SEND_F3 peer 2, slot 1
//	x.RecvB(0x0001_0000_0002_0000)    // 1RECV_B0 peer 2, slot 0
//	x.BatchEnd()
//
// The transfer methods between the two do what they always do (check their
// arguments, claim or check the slot, mark a receive pending) but collect
// the transfer in the open batch instead of posting it; BatchEnd posts the
// whole batch to the comm goroutine as one entry, which issues it through
// transport.Batch (one group: MPI Startall/Waitall, NCCL group calls; the
// sends then the receives on a buffered transport) and then hands each
// receive to its slot as a single receive does. So the steps that consume
// a batch's receives wait for the whole batch, as the strict model says,
// and the comm stream runs the next transfer after it. A step that would
// wait for a receive of the open batch fails instead (verify allows only
// transfers in a batch). Single transfers take the path they always took.

// opBatch is one batch: its header entry on the comm channel (xfer.batch
// points back at it) and the transfers it holds.
type opBatch struct {
	hdr xfer
	ops []commOp
	tr  []transport.BatchOp // what transport.Batch gets, reused
}

// BatchBegin opens a batch (BATCH_BEGIN): the transfers up to BatchEnd are
// posted together.
//
//go:noinline
func (x *Exec) BatchBegin() {
	if x.failedNow() {
		return
	}
	if x.batch != nil {
		x.stepFailf(OpBatchBegin, -1, -1, -1, "a batch is already open (%d transfers so far); batches do not nest: BATCH_END first", len(x.batch.ops))
		return
	}
	if x.tr == nil {
		x.stepFailf(OpBatchBegin, -1, -1, -1, "no transport")
		return
	}
	if x.nBatch == len(x.batches) {
		b := &opBatch{hdr: xfer{kind: OpBatchEnd}}
		b.hdr.batch = b
		x.batches = append(x.batches, b)
	}
	b := x.batches[x.nBatch]
	x.nBatch++
	b.ops = b.ops[:0]
	x.batch = b
}

// BatchEnd closes the open batch (BATCH_END) and posts it to the comm
// goroutine; the host does not wait for it.
//
//go:noinline
func (x *Exec) BatchEnd() {
	b := x.batch
	x.batch = nil
	if x.failedNow() {
		return
	}
	switch {
	case b == nil:
		x.stepFailf(OpBatchEnd, -1, -1, -1, "no batch is open: BATCH_BEGIN must come first")
		return
	case len(b.ops) == 0:
		x.stepFailf(OpBatchEnd, -1, -1, -1, "an empty batch: a batch holds at least one transfer")
		return
	}
	x.post(commOp{x: &b.hdr, peer: -1, stage: -1, micro: -1, slot: -1})
}

// dropBatch forgets a batch left open (the rank failed inside it, or its
// program never closed it) and reports the latter.
func (x *Exec) dropBatch() {
	b := x.batch
	if b == nil {
		return
	}
	x.batch = nil
	if !x.failedNow() {
		x.stepFailf(OpBatchBegin, -1, -1, -1, "this batch (%d transfers) is never closed: BATCH_END must follow its transfers", len(b.ops))
	}
}

// runBatch is the comm goroutine's side of a batch: one transport.Batch of
// all its transfers, then every receive handed to its slot.
func (x *Exec) runBatch(b *opBatch) {
	ops := b.ops
	var err error
	if !x.failedNow() {
		b.tr = b.tr[:0]
		for i := range ops {
			op := &ops[i]
			t := op.x
			bo := transport.BatchOp{Peer: int(op.peer), Ch: t.ch, Send: !t.recv}
			if bo.Send {
				bo.Tag, bo.T = transport.Tag{Stage: op.stage, Micro: op.micro}, op.t
			}
			b.tr = append(b.tr, bo)
		}
		if err = transport.Batch(x.tr, b.tr); err != nil {
			op := x.blame(ops, err)
			x.stepFail(op.x.kind, int(op.stage), int(op.micro), int(op.peer), fmt.Errorf("in a batch of %d transfers: %w", len(ops), err))
		}
	}
	for i := range ops {
		op := &ops[i]
		t := op.x
		if !t.recv {
			continue
		}
		var got *tensor.Dense
		if err == nil && !x.failedNow() {
			bo := &b.tr[i]
			if terr := op.checkTag(bo.Tag); terr != nil {
				x.stepFail(t.kind, int(op.stage), int(op.micro), int(op.peer), terr)
			} else {
				got = bo.T
			}
			bo.T = nil
		}
		x.deliver(op, got)
	}
	for i := range ops {
		ops[i].t = nil // let go of the sent tensors
	}
}

// blame returns the transfer of a batch that err is about: the one with
// the peer and direction of a progress timeout, else the first.
func (x *Exec) blame(ops []commOp, err error) *commOp {
	var pe *transport.ProgressError
	if errors.As(err, &pe) {
		for i := range ops {
			if op := &ops[i]; int(op.peer) == pe.Peer && op.x.ch == pe.Ch && op.x.recv == (pe.Op != "send") {
				return op
			}
		}
		for i := range ops {
			if op := &ops[i]; int(op.peer) == pe.Peer {
				return op
			}
		}
	}
	return &ops[0]
}
