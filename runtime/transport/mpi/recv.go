//go:build mpi

package mpi

// The receiving side: one inbox per (peer, channel), each with a
// persistent receive of its header (MPI_Recv_init, restarted with
// MPI_Start after each message) and, for a payload too large to travel
// inline, a receive posted straight into the tensor that Recv will return
// (from the rank's wire.RecvPool, so a caller that recycles gets no
// allocation per message). Whoever waits drives: Recv, Batch and the
// progress goroutine test every receive at once (MPI_Testsome) and move
// completed messages into the inboxes' queues.
//
// Buffered mode keeps every header receive posted while its peer's queue
// is under Config.RecvQueueBytes and RecvQueueFrames, so senders never
// wait for the matching Recv, only for room; under Sync a header receive
// is posted only for a Recv (or a batch's receive) that waits for it.

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
)

// received is a message in an inbox's queue.
type received struct {
	tag    transport.Tag
	x      *tensor.Dense
	charge int64 // its bytes plus wire.FrameOverhead
}

// inbox is the receiving state of one (peer, channel), under mpiT.rmu.
type inbox struct {
	peer    int
	ch      abi.Channel
	hbuf    cbuf // the header and an inline payload
	started bool // the header receive is posted
	demand  int  // Sync: receives waiting whose header has not arrived
	// The payload in flight, after its header.
	inflight bool
	h        mpiHeader
	x        *tensor.Dense
	pin      runtime.Pinner
	queue    []received
	head     int
}

// peerQueue is what one peer's inboxes hold, for the bounds.
type peerQueue struct {
	bytes  int64
	frames int
	full   bool // a header receive was held back for lack of room
	peak   int64
	peakN  int
}

// receiver is mpiT's receiving state.
type receiver struct {
	boxes     []inbox // (peer, channel) at peer*wire.Channels + channel code; none for this rank
	reqs      *C.MPI_Request
	statuses  *C.MPI_Status
	idx       *C.int
	counts    *C.int
	nreq      int
	queued    []peerQueue
	inflight  int   // payloads in flight
	completed int64 // messages completed (for the progress goroutine)
	pool      *wire.RecvPool
}

// box is the inbox of (peer, ch).
func (t *mpiT) box(peer int, ch abi.Channel) *inbox {
	return &t.rx.boxes[peer*wire.Channels+int(wire.ChannelCode(ch))]
}

// req is request i: 2k for inbox k's header, 2k+1 for its payload.
func (t *mpiT) req(i int) *C.MPI_Request {
	return (*C.MPI_Request)(unsafe.Add(unsafe.Pointer(t.rx.reqs), i*int(unsafe.Sizeof(*t.rx.reqs))))
}

// startReceiver creates the inboxes and their persistent header receives
// and, in buffered mode, posts them.
func (t *mpiT) startReceiver() error {
	rx := &t.rx
	n := t.world * wire.Channels
	rx.boxes = make([]inbox, n)
	rx.nreq = 2 * n
	rx.reqs = C.ppg_requests(C.int(rx.nreq), &rx.statuses)
	rx.idx = (*C.int)(C.malloc(C.size_t(rx.nreq) * C.size_t(unsafe.Sizeof(C.int(0)))))
	rx.counts = (*C.int)(C.malloc(C.size_t(rx.nreq) * C.size_t(unsafe.Sizeof(C.int(0)))))
	rx.queued = make([]peerQueue, t.world)
	rx.pool = wire.NewRecvPool(t.cfg.RecvQueueBytes)
	for p := range t.world {
		if p == t.rank {
			continue
		}
		for ch := abi.ActChannel; ch <= abi.DataChannel; ch++ {
			k := p*wire.Channels + int(wire.ChannelCode(ch))
			b := &rx.boxes[k]
			b.peer, b.ch = p, ch
			b.hbuf = newCbuf(mpiHeaderLen + mpiInlineBytes)
			if code := C.ppg_recv_init(b.hbuf.p, C.int(b.hbuf.n), C.int(p), C.int(mpiTag(ch, 0)), t.req(2*k)); code != C.MPI_SUCCESS {
				return mpiError("MPI_Recv_init (header)", code)
			}
			if err := t.maybePost(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// maybePost posts b's header receive if it is idle and may take a
// message: under Sync when a receive waits for one, else when its peer's
// queue has room.
func (t *mpiT) maybePost(b *inbox) error {
	if b.started || b.inflight {
		return nil
	}
	if t.cfg.Sync {
		if b.demand == 0 {
			return nil
		}
	} else if q := &t.rx.queued[b.peer]; q.bytes >= t.cfg.RecvQueueBytes || q.frames >= t.cfg.RecvQueueFrames {
		q.full = true
		return nil
	}
	k := b.peer*wire.Channels + int(wire.ChannelCode(b.ch))
	if code := C.ppg_start(t.req(2 * k)); code != C.MPI_SUCCESS {
		return transport.RecvError(t.rank, b.ch, b.peer, mpiError("MPI_Start (header)", code))
	}
	b.started = true
	return nil
}

// drive tests every receive once and handles what completed; a failure
// fails the transport. Called under rmu.
func (t *mpiT) drive() error {
	rx := &t.rx
	if rx.nreq == 0 { // not started yet
		return nil
	}
	var out C.int
	if code := C.ppg_testsome(C.int(rx.nreq), rx.reqs, &out, rx.idx, rx.counts, rx.statuses); code != C.MPI_SUCCESS {
		err := fmt.Errorf("transport: rank %d: %w", t.rank, mpiError("MPI_Testsome (receives)", code))
		t.fail(err)
		return err
	}
	if out == 0 {
		return nil
	}
	rx.completed += int64(out)
	idx := unsafe.Slice(rx.idx, int(out))
	counts := unsafe.Slice(rx.counts, int(out))
	for i := range idx {
		b := &rx.boxes[int(idx[i])/2]
		var err error
		if idx[i]%2 == 0 {
			b.started = false
			err = t.gotHeader(b, int(counts[i]))
		} else {
			err = t.gotPayload(b, int(counts[i]))
		}
		if err != nil {
			err = transport.RecvError(t.rank, b.ch, b.peer, err)
			t.fail(err)
			return err
		}
	}
	return nil
}

// gotHeader handles a header (and inline payload) of n bytes in b.hbuf.
func (t *mpiT) gotHeader(b *inbox, n int) error {
	if t.cfg.Sync {
		b.demand--
	}
	h, err := decodeMPIHeader(b.hbuf.bytes()[:min(n, mpiHeaderLen)], t.cfg.MaxMessageBytes)
	if err != nil {
		return err
	}
	inline := h.n <= mpiInlineBytes
	if want := mpiHeaderLen + int(h.n); inline && n != want {
		return fmt.Errorf("%w: sent a message of %d bytes for a header of shape %v with its payload inline (%d bytes)", transport.ErrProtocol, n, h.dims, want)
	} else if !inline && n != mpiHeaderLen {
		return fmt.Errorf("%w: sent a header of %d bytes, want %d", transport.ErrProtocol, n, mpiHeaderLen)
	}
	x, raw := t.rx.pool.Get(h.dt, h.dims)
	if inline {
		copy(raw, b.hbuf.bytes()[mpiHeaderLen:n])
		t.enqueue(b, h.tag, x, h.n)
		return t.maybePost(b)
	}
	b.pin.Pin(&raw[0])
	k := b.peer*wire.Channels + int(wire.ChannelCode(b.ch))
	if code := C.ppg_irecv(unsafe.Pointer(&raw[0]), C.int(len(raw)), C.int(b.peer), C.int(mpiTag(b.ch, 1)), t.req(2*k+1)); code != C.MPI_SUCCESS {
		b.pin.Unpin()
		return mpiError("MPI_Irecv (payload)", code)
	}
	b.inflight, b.h, b.x = true, h, x
	t.rx.inflight++
	return nil
}

// gotPayload handles the payload of n bytes received into b.x.
func (t *mpiT) gotPayload(b *inbox, n int) error {
	b.pin.Unpin()
	b.inflight = false
	t.rx.inflight--
	if int64(n) != b.h.n {
		return fmt.Errorf("%w: sent a payload of %d bytes after a header of shape %v (%d bytes)", transport.ErrProtocol, n, b.h.dims, b.h.n)
	}
	x := b.x
	b.x = nil
	t.enqueue(b, b.h.tag, x, b.h.n)
	return t.maybePost(b)
}

// enqueue appends a received message to b's queue.
func (t *mpiT) enqueue(b *inbox, tag transport.Tag, x *tensor.Dense, n int64) {
	r := received{tag: tag, x: x, charge: n + wire.FrameOverhead}
	b.queue = append(b.queue, r)
	q := &t.rx.queued[b.peer]
	q.bytes += r.charge
	q.frames++
	q.peak, q.peakN = max(q.peak, q.bytes), max(q.peakN, q.frames)
	t.last[b.peer][b.ch] = &r.tag
}

// pop takes the first message of b's queue, if any, and posts the header
// receives its peer's queue held back for lack of room.
func (t *mpiT) pop(b *inbox) (received, bool, error) {
	if b.head == len(b.queue) {
		return received{}, false, nil
	}
	r := b.queue[b.head]
	b.queue[b.head] = received{}
	b.head++
	if b.head == len(b.queue) {
		b.queue, b.head = b.queue[:0], 0
		if cap(b.queue) > 64 {
			b.queue = nil // a burst's array is not kept
		}
	}
	q := &t.rx.queued[b.peer]
	q.bytes -= r.charge
	q.frames--
	if q.full {
		q.full = false
		for ch := abi.ActChannel; ch <= abi.DataChannel; ch++ {
			if err := t.maybePost(t.box(b.peer, ch)); err != nil {
				return r, true, err
			}
		}
	}
	return r, true, nil
}

// stopReceiver cancels and frees the receives (Close, after the barrier:
// no peer sends any more).
func (t *mpiT) stopReceiver() {
	rx := &t.rx
	for k := range rx.boxes {
		b := &rx.boxes[k]
		if b.hbuf.p == nil {
			continue
		}
		if code := C.ppg_request_free(t.req(2*k), boolInt(b.started)); code != C.MPI_SUCCESS {
			t.cfg.Logger.Warn("transport: MPI: freeing a header receive failed", "rank", t.rank, "err", mpiErrString(code))
			continue // MPI may still write the buffer
		}
		if b.inflight {
			if code := C.ppg_request_free(t.req(2*k+1), 1); code != C.MPI_SUCCESS {
				continue
			}
			b.pin.Unpin()
		}
		b.hbuf.free()
		b.hbuf.p = nil
	}
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// Recycle hands back a tensor Recv returned (transport.Recycler): a later
// receive of the same dtype and element count lands in its memory.
func (t *mpiT) Recycle(x *tensor.Dense) { t.rx.pool.Put(x) }

// queueStats is a peer's receive queue now and at its peak, in charged
// bytes and messages (for tests).
func (t *mpiT) queueStats(peer int) (bytes int64, frames int, peakBytes int64, peakFrames int) {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	q := t.rx.queued[peer]
	return q.bytes, q.frames, q.peak, q.peakN
}

// lastTag returns the last tag received from peer on ch, nil if none.
func (t *mpiT) lastTag(peer int, ch abi.Channel) *transport.Tag {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	return t.last[peer][ch]
}
