package transport

import (
	"fmt"

	"github.com/ppgen/ppgen/abi"
	"gorgonia.org/tensor"
)

// BatchOp is one transfer of a batch: a send of T, tagged Tag, to Peer on
// Ch, or (Send false) a receive from Peer on Ch, which sets Tag and T.
type BatchOp struct {
	Peer int
	Ch   abi.Channel
	Send bool
	Tag  Tag           // send: the tag sent; receive: set to the tag received
	T    *tensor.Dense // send: the tensor sent; receive: set to the tensor received
}

func (op *BatchOp) String() string {
	if op.Send {
		return fmt.Sprintf("send %s %v to rank %d", op.Ch, op.Tag, op.Peer)
	}
	return fmt.Sprintf("recv %s from rank %d", op.Ch, op.Peer)
}

// Batcher is implemented by transports that issue several transfers as one
// group (MPI Startall/Waitall, NCCL group calls): every op of a batch is
// started before any is waited for, so the ops may complete in any order.
// This is the strict model's batch: under rendezvous semantics a batch that
// sends to and receives from the same peer completes, where the same ops one
// at a time could deadlock.
type Batcher interface {
	// Batch starts every op of ops and waits for all of them, bounded by
	// the transport's progress timeout; on return each receive's Tag and T
	// are set. The error names the first op that failed. FIFO order per
	// (peer, channel) holds across and within batches: two receives from
	// one peer on one channel complete in the order the peer sent.
	Batch(ops []BatchOp) error
}

// Batch runs ops on t as one batch: through t's own [Batcher] if it has
// one, else every send in order and then every receive in order, which is
// the same on a buffered transport (a send never waits for its receive).
func Batch(t Transport, ops []BatchOp) error {
	if b, ok := t.(Batcher); ok {
		return b.Batch(ops)
	}
	for i := range ops {
		op := &ops[i]
		if op.Send {
			if err := t.Send(op.Peer, op.Ch, op.Tag, op.T); err != nil {
				return fmt.Errorf("batch op %d (%s): %w", i, op, err)
			}
		}
	}
	for i := range ops {
		op := &ops[i]
		if !op.Send {
			tag, v, err := t.Recv(op.Peer, op.Ch)
			if err != nil {
				return fmt.Errorf("batch op %d (%s): %w", i, op, err)
			}
			op.Tag, op.T = tag, v
		}
	}
	return nil
}
