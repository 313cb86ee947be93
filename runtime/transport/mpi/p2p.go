//go:build mpi

package mpi

// Point to point: Send, Recv and Batch, and the polling they wait with.

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/nap"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
)

// Polling: a wait tests (and drives the receives) in a loop, yielding the
// goroutine between tests, for spinFor after it began or last made
// progress, as MPI's own blocking calls spin; then it sleeps between
// tests, the sleep growing from 1 µs to maxPollSleep, so that a long wait
// costs little CPU and still sees a completion within about maxPollSleep.
const (
	spinFor      = 2 * time.Millisecond
	maxPollSleep = 100 * time.Microsecond
)

// Small buffered sends go by MPI_Isend, which completes once MPI copied
// the message, whether or not the receiver matched it, except every
// markEvery-th one to a (peer, channel), which goes by MPI_Issend: MPI
// matches one (peer, tag)'s messages in order, so a matched marker says
// that every message before it was matched. Send waits while a peer has
// more than markWindow markers unmatched, so at most about
// (markWindow+1)·markEvery small messages per channel wait unmatched in
// the peer's MPI, whatever its receive queue's bound.
const (
	markEvery  = 32
	markWindow = 4
)

// poll calls step until it reports done or an error, the transport fails
// (then the failure), or Timeout passes without step reporting done
// (errNoProgress). Between steps it drives the receives (when no one else
// does), so that a rank waiting on anything still takes what its peers
// send: a peer's buffered Send may be waiting for this rank's receive
// queue.
func (t *mpiT) poll(step func() (bool, error)) error {
	return t.pollLoop(func(*time.Time) (bool, error) { return step() }, true)
}

// pollLoop is poll's loop; drive false: step drives the receives itself.
func (t *mpiT) pollLoop(step func(deadline *time.Time) (bool, error), drive bool) error {
	t.waiters.Add(1)
	defer t.waiters.Add(-1)
	deadline := time.Now().Add(t.cfg.Timeout)
	spinUntil := time.Now().Add(spinFor)
	sleep := time.Duration(0)
	spins := 0
	for {
		was := deadline
		done, err := step(&deadline)
		if err != nil || done {
			return err
		}
		if t.isFailed() {
			return t.err
		}
		if t.npending.Load() > 0 {
			t.reapSends() // buffered sends complete while this waits
		}
		if drive && t.rmu.TryLock() {
			t.drive()
			t.rmu.Unlock()
		}
		spins++
		if deadline == was && sleep == 0 && spins%16 != 0 {
			// Spinning: the clock is read every 16th round only.
			runtime.Gosched()
			continue
		}
		now := time.Now()
		if deadline != was {
			spinUntil, sleep = now.Add(spinFor), 0
		}
		if now.After(deadline) {
			return wire.ErrNoProgress
		}
		if now.Before(spinUntil) {
			runtime.Gosched()
			continue
		}
		sleep = min(max(2*sleep, time.Microsecond), maxPollSleep)
		nap.Sleep(sleep) // time.Sleep would round it up to ~1 ms
	}
}

// startSend posts x, tagged tag, to peer on ch: the header with the
// payload inline (copied into C memory with it) when it is small, else
// the header and then a send straight from the tensor's memory, pinned.
// They are synchronous sends (MPI_Issend), complete once matched, but for
// small buffered ones, where only markers are (markEvery).
func (t *mpiT) startSend(peer int, ch abi.Channel, tag transport.Tag, x *tensor.Dense) (*mpiOp, error) {
	v, err := wire.PayloadOf(x)
	if err != nil {
		return nil, err
	}
	if int64(len(v.Raw)) > t.cfg.MaxMessageBytes {
		return nil, fmt.Errorf("%w: %d-byte tensor of shape %v over the %d-byte cap (mpi.Config.MaxMessageBytes)", transport.ErrFrameTooLarge, len(v.Raw), v.Dims, t.cfg.MaxMessageBytes)
	}
	op := t.sendOp(peer, ch)
	op.tag = tag
	inline := len(v.Raw) <= mpiInlineBytes
	if inline {
		op.hdr.n, op.pdone = mpiHeaderLen+len(v.Raw), true
		copy(op.hdr.bytes()[mpiHeaderLen:], v.Raw)
	} else {
		op.hdr.n = mpiHeaderLen
		op.pin.Pin(&v.Raw[0]) // kept alive and in place until Unpin
		op.pinned = true
	}
	encodeMPIHeader(op.hdr.bytes(), tag, v)
	t.smu.Lock()
	defer t.smu.Unlock()
	ssend := C.int(1)
	if inline && !t.cfg.Sync {
		k := peer*wire.Channels + int(wire.ChannelCode(ch))
		if t.sendSeq[k]%markEvery != 0 {
			ssend = 0
		}
		t.sendSeq[k]++
		op.windowed = ssend == 1
	}
	if code := C.ppg_isend(op.hdr.p, C.int(op.hdr.n), C.int(peer), C.int(mpiTag(ch, 0)), ssend, op.hreq); code != C.MPI_SUCCESS {
		t.recycleOp(op)
		return nil, mpiError("MPI_Issend (header)", code)
	}
	if !inline {
		if code := C.ppg_isend(unsafe.Pointer(&v.Raw[0]), C.int(len(v.Raw)), C.int(peer), C.int(mpiTag(ch, 1)), 1, op.preq); code != C.MPI_SUCCESS {
			t.leak(op) // the header is in flight
			return nil, mpiError("MPI_Issend (payload)", code)
		}
	}
	return op, nil
}

// testSend advances a send; true once all of its messages completed.
func (t *mpiT) testSend(op *mpiOp) (bool, error) {
	var err error
	if !op.hdone {
		if op.hdone, _, _, err = t.test(op.hreq, "MPI_Test (header send)"); err != nil {
			return false, err
		}
	}
	if !op.pdone {
		if op.pdone, _, _, err = t.test(op.preq, "MPI_Test (payload send)"); err != nil {
			return false, err
		}
	}
	if op.hdone && op.pdone {
		t.recycleOp(op)
		return true, nil
	}
	return false, nil
}

// sendOpBytes is the header buffer of a pooled send op: a header and an
// inline payload.
const sendOpBytes = mpiHeaderLen + mpiInlineBytes

// maxFreeOps bounds the free send ops a rank keeps.
const maxFreeOps = 256

// sendOp returns a send op for peer and ch, from the free list when it
// has one: a send allocates nothing in the steady state.
func (t *mpiT) sendOp(peer int, ch abi.Channel) *mpiOp {
	t.opsMu.Lock()
	var op *mpiOp
	if n := len(t.freeOps); n > 0 {
		op = t.freeOps[n-1]
		t.freeOps[n-1] = nil
		t.freeOps = t.freeOps[:n-1]
	}
	t.opsMu.Unlock()
	if op == nil {
		op = newOp(peer, ch)
		op.hdr, op.pooled = newCbuf(sendOpBytes), true
	}
	op.peer, op.ch = peer, ch
	op.hdone, op.pdone, op.windowed = false, false, false
	return op
}

// recycleOp releases a completed op: a send op's buffers go back to the
// free list, with room; others are freed.
func (t *mpiT) recycleOp(op *mpiOp) {
	if op.pinned {
		op.pin.Unpin()
		op.pinned = false
	}
	t.opsMu.Lock()
	keep := op.pooled && len(t.freeOps) < maxFreeOps
	if keep {
		t.freeOps = append(t.freeOps, op)
	}
	t.opsMu.Unlock()
	if !keep {
		op.release()
	}
}

// reapSends tests the buffered sends in flight and drops the completed
// ones, which it counts; a failed one fails the transport.
func (t *mpiT) reapSends() (completed int) {
	t.mu.Lock()
	kept := t.pending[:0]
	var serr error
	for _, op := range t.pending {
		peer, windowed := op.peer, op.windowed // a completed op is reused at once
		done, err := t.testSend(op)
		switch {
		case err != nil:
			serr = transport.SendError(t.rank, op.ch, op.peer, err)
			mpiLeaked = append(mpiLeaked, op)
		case !done:
			kept = append(kept, op)
			continue
		}
		completed++
		if windowed {
			t.sendsTo[peer]--
		}
	}
	clear(t.pending[len(kept):])
	t.pending = kept
	t.npending.Store(int32(len(kept)))
	t.mu.Unlock()
	if serr != nil {
		t.fail(serr)
	}
	return completed
}

// handOver keeps a buffered inline send in flight (a waiter or the
// progress goroutine completes it) and reports how many markers its peer
// has unmatched.
func (t *mpiT) handOver(op *mpiOp) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = append(t.pending, op)
	t.npending.Store(int32(len(t.pending)))
	if op.windowed {
		t.sendsTo[op.peer]++
	}
	return t.sendsTo[op.peer]
}

// sendNote is what a send that waited in vain was waiting for.
func (t *mpiT) sendNote(peer int, tag transport.Tag, hdone bool) string {
	if t.cfg.Sync {
		if hdone {
			return fmt.Sprintf("synchronous send (mpi.Config.Sync) of %v: rank %d took the header, the payload did not complete", tag, peer)
		}
		return fmt.Sprintf("synchronous send (mpi.Config.Sync) of %v: rank %d has not started the matching receive", tag, peer)
	}
	return fmt.Sprintf("send of %v: rank %d did not take it (its receive queue from this rank is full, mpi.Config.RecvQueueBytes, or it stopped receiving)", tag, peer)
}

func (t *mpiT) Send(peer int, ch abi.Channel, tag transport.Tag, x *tensor.Dense) error {
	if err := transport.CheckPeer(t.rank, t.world, peer, ch); err != nil {
		return fmt.Errorf("transport: rank %d: send %s: %w", t.rank, ch, err)
	}
	if err := t.usable(); err != nil {
		return transport.SendError(t.rank, ch, peer, err)
	}
	op, err := t.startSend(peer, ch, tag, x)
	if err != nil {
		t.fail(transport.SendError(t.rank, ch, peer, err))
		return transport.SendError(t.rank, ch, peer, err)
	}
	var wait func() (bool, error)
	switch {
	case !t.cfg.Sync && !op.pinned:
		// Buffered and inline: the op owns its copy; wait only when the
		// peer has too many markers unmatched.
		if t.handOver(op) <= markWindow {
			return nil
		}
		wait = func() (bool, error) {
			t.reapSends()
			t.mu.Lock()
			defer t.mu.Unlock()
			return t.sendsTo[peer] <= markWindow/2, nil
		}
		op = nil
	default:
		wait = func() (bool, error) { return t.testSend(op) }
	}
	err = t.poll(wait)
	if err == nil {
		return nil
	}
	hdone := false
	if op != nil {
		hdone = op.hdone
		t.leak(op)
	}
	if errors.Is(err, wire.ErrNoProgress) {
		pe := transport.NewProgressError(t.rank, "send", peer, ch, t.cfg.Timeout, t.setting, nil, t.sendNote(peer, tag, hdone))
		t.fail(pe)
		return pe
	}
	t.fail(transport.SendError(t.rank, ch, peer, err))
	return transport.SendError(t.rank, ch, peer, err)
}

// want registers a receive that will wait on b (under Sync, its header
// receive is posted for it). Called under rmu.
func (t *mpiT) want(b *inbox) error {
	if !t.cfg.Sync {
		return nil
	}
	b.demand++
	return t.maybePost(b)
}

// recvNote is what a receive that waited in vain on b saw, if anything.
func (t *mpiT) recvNote(b *inbox) string {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	if b.inflight {
		return fmt.Sprintf("the header of %v arrived, its payload did not", b.h.tag)
	}
	return ""
}

func (t *mpiT) Recv(peer int, ch abi.Channel) (transport.Tag, *tensor.Dense, error) {
	if err := transport.CheckPeer(t.rank, t.world, peer, ch); err != nil {
		return transport.Tag{}, nil, fmt.Errorf("transport: rank %d: recv %s: %w", t.rank, ch, err)
	}
	if err := t.usable(); err != nil {
		return transport.Tag{}, nil, transport.RecvError(t.rank, ch, peer, err)
	}
	b := t.box(peer, ch)
	t.rmu.Lock()
	err := t.want(b)
	t.rmu.Unlock()
	var got received
	if err == nil {
		err = t.pollLoop(func(*time.Time) (bool, error) {
			t.rmu.Lock()
			defer t.rmu.Unlock()
			r, ok, err := t.pop(b)
			if !ok && err == nil {
				if err = t.drive(); err == nil {
					r, ok, err = t.pop(b)
				}
			}
			got = r
			return ok, err
		}, false)
	}
	if err == nil {
		return got.tag, got.x, nil
	}
	if errors.Is(err, wire.ErrNoProgress) {
		pe := transport.NewProgressError(t.rank, "recv", peer, ch, t.cfg.Timeout, t.setting, t.lastTag(peer, ch), t.recvNote(b))
		t.fail(pe)
		return transport.Tag{}, nil, pe
	}
	t.fail(transport.RecvError(t.rank, ch, peer, err))
	return transport.Tag{}, nil, transport.RecvError(t.rank, ch, peer, err)
}

// Batch starts every op (sends first, then the receives), then polls them
// all until every one completed, bounded by Timeout without any
// completing. A buffered inline send is handed over like Send's: the
// batch waits for the receives and the other sends.
func (t *mpiT) Batch(ops []transport.BatchOp) error {
	if err := t.usable(); err != nil {
		return fmt.Errorf("transport: rank %d: batch: %w", t.rank, err)
	}
	for i := range ops {
		op := &ops[i]
		if err := transport.CheckPeer(t.rank, t.world, op.Peer, op.Ch); err != nil {
			return fmt.Errorf("transport: rank %d: batch op %d (%s): %w", t.rank, i, op, err)
		}
	}
	sends := make([]*mpiOp, len(ops))
	done := make([]bool, len(ops))
	fail := func(i int, err error) error {
		for _, op := range sends {
			if op != nil {
				t.leak(op)
			}
		}
		err = fmt.Errorf("batch op %d (%s): %w", i, &ops[i], err)
		t.fail(err)
		return err
	}
	for i := range ops {
		if op := &ops[i]; op.Send {
			m, err := t.startSend(op.Peer, op.Ch, op.Tag, op.T)
			if err != nil {
				return fail(i, transport.SendError(t.rank, op.Ch, op.Peer, err))
			}
			if !t.cfg.Sync && !m.pinned {
				t.handOver(m)
				done[i] = true
				continue
			}
			sends[i] = m
		}
	}
	t.rmu.Lock()
	for i := range ops {
		if op := &ops[i]; !op.Send {
			if err := t.want(t.box(op.Peer, op.Ch)); err != nil {
				t.rmu.Unlock()
				return fail(i, err)
			}
		}
	}
	t.rmu.Unlock()
	var failedAt int // the op that failed, or the first one still waiting
	err := t.pollLoop(func(deadline *time.Time) (bool, error) {
		all := true
		failedAt = -1
		progress := false
		t.rmu.Lock()
		err := t.drive()
		for i := range ops {
			if done[i] || ops[i].Send || err != nil {
				continue
			}
			var r received
			var ok bool
			if r, ok, err = t.pop(t.box(ops[i].Peer, ops[i].Ch)); ok {
				ops[i].Tag, ops[i].T, done[i], progress = r.tag, r.x, true, true
			} else if err == nil && all {
				all, failedAt = false, i
			}
		}
		t.rmu.Unlock()
		if err != nil {
			return false, err
		}
		for i, m := range sends {
			if m == nil || done[i] {
				continue
			}
			ok, err := t.testSend(m)
			if err != nil {
				failedAt = i
				return false, err
			}
			if ok {
				done[i], progress, sends[i] = true, true, nil
			} else if all {
				all, failedAt = false, i
			}
		}
		if progress {
			*deadline = time.Now().Add(t.cfg.Timeout)
		}
		return all, nil
	}, false)
	failedAt = max(failedAt, 0)
	if err == nil {
		return nil
	}
	if errors.Is(err, wire.ErrNoProgress) {
		op := &ops[failedAt]
		kind, note := "recv", fmt.Sprintf("batch op %d of %d (%s), the first not complete", failedAt, len(ops), op)
		var last *transport.Tag
		if op.Send {
			kind = "send"
			note += ": " + t.sendNote(op.Peer, op.Tag, sends[failedAt] != nil && sends[failedAt].hdone)
		} else {
			last = t.lastTag(op.Peer, op.Ch)
		}
		pe := transport.NewProgressError(t.rank, kind, op.Peer, op.Ch, t.cfg.Timeout, t.setting, last, note)
		fail(failedAt, pe)
		return pe
	}
	return fail(failedAt, err)
}
