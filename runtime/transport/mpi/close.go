//go:build mpi

package mpi

// The MPI transport's lifecycle after New: the progress goroutine that
// drives buffered sends, Close and Abort.

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/ppgen/ppgen/runtime/internal/nap"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
)

// progress runs until Close: it drives the receives (so that peers' sends
// complete into the receive queues while the rank computes), completes
// buffered sends and frees their buffers, and watches for abort news from
// any peer. It spins while messages complete and backs off, up to
// maxIdleSleep, while none do; while a Send, Recv or Batch waits (and
// drives the receives and completes the sends itself) it only watches for
// news, every millisecond.
func (t *mpiT) progress() {
	defer close(t.stopped)
	newsDone := false
	sleep := time.Duration(0)
	for {
		select {
		case <-t.stop:
			return
		default:
		}
		if !newsDone {
			done, count, src, err := t.test(t.newsReq, "MPI_Test (abort news)")
			switch {
			case err != nil:
				newsDone = true
				t.fail(fmt.Errorf("transport: rank %d: %w", t.rank, err))
			case done:
				newsDone = true
				news := decodeMPINews(t.news.bytes()[:min(max(count, 0), t.news.n)], src, t.world)
				t.fail(news)
			}
		}
		if t.waiters.Load() > 0 { // a waiter drives and completes sends
			sleep = 0
			time.Sleep(time.Millisecond)
			continue
		}
		moved := false
		if t.rmu.TryLock() { // else a waiter drives
			before := t.rx.completed
			if t.drive() == nil {
				moved = t.rx.completed != before
			}
			t.rmu.Unlock()
		}
		if t.reapSends() > 0 {
			moved = true
		}
		if moved {
			sleep = 0
			runtime.Gosched()
			continue
		}
		sleep = min(max(2*sleep, time.Microsecond), maxIdleSleep)
		nap.Sleep(sleep)
	}
}

// maxIdleSleep bounds the progress goroutine's sleep while no one waits:
// a peer's large buffered Send to this rank, busy computing, waits for it
// to be matched at most about that long (plus the timer's slack).
const maxIdleSleep = 200 * time.Microsecond

// Close waits (bounded by Timeout) until every buffered send completed and
// every rank reached Close (a barrier), then finalizes MPI. A receive from
// a rank that closed waits until the progress timeout: MPI has no goodbye
// per peer. After a failure it returns the failure without finalizing (the
// job is ending; MPI_Finalize could wait on a rank that is gone).
// Idempotent.
func (t *mpiT) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	if t.isFailed() {
		return t.err
	}
	err := t.poll(func() (bool, error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		return len(t.pending) == 0, nil
	})
	if err != nil {
		return t.closeFailed(err, "its sends to be received")
	}
	req := newRequest()
	defer C.free(unsafe.Pointer(req)) // MPI keeps the handle's value, never its address
	if code := C.ppg_ibarrier(req); code != C.MPI_SUCCESS {
		return t.closeFailed(mpiError("MPI_Ibarrier", code), "")
	}
	err = t.poll(func() (bool, error) {
		done, _, _, err := t.test(req, "MPI_Test (barrier)")
		return done, err
	})
	if err != nil {
		return t.closeFailed(err, "every rank to reach Close")
	}
	close(t.stop)
	<-t.stopped
	t.rmu.Lock()
	t.stopReceiver()
	t.rmu.Unlock()
	t.opsMu.Lock()
	for _, op := range t.freeOps {
		op.release()
	}
	t.freeOps = nil
	t.opsMu.Unlock()
	t.freeGroups() // coll.go: the collectives' communicators
	if code := C.ppg_cancel(t.newsReq); code != C.MPI_SUCCESS {
		t.cfg.Logger.Warn("transport: MPI: cancelling the abort-news receive failed", "rank", t.rank, "err", mpiErrString(code))
	}
	t.news.free()
	C.free(unsafe.Pointer(t.newsReq))
	t.fail(transport.ErrClosed)
	if err := mpiFinalize(); err != nil {
		return fmt.Errorf("transport: rank %d: close: %w", t.rank, err)
	}
	return nil
}

func (t *mpiT) closeFailed(err error, waiting string) error {
	if errors.Is(err, wire.ErrNoProgress) {
		var peers []string
		t.mu.Lock()
		for _, op := range t.pending {
			peers = append(peers, fmt.Sprintf("%s %v to rank %d", op.ch, op.tag, op.peer))
		}
		t.mu.Unlock()
		msg := fmt.Sprintf("no progress for %v (%s) waiting for %s", t.cfg.Timeout, t.setting, waiting)
		if len(peers) > 0 {
			msg += "; unreceived: " + strings.Join(peers, ", ")
		}
		err = fmt.Errorf("%w: %s", transport.ErrTimeout, msg)
	}
	err = fmt.Errorf("transport: rank %d: close: %w", t.rank, err)
	t.fail(err)
	return err
}

// Abort logs the cause (slog, Error), tells every peer (their pending and
// future operations fail with "rank N aborted: cause", so that each logs
// its own failed step), waits AbortLinger, then calls MPI_Abort, which ends
// every process of the job: it does not return. After Close it does
// nothing.
func (t *mpiT) Abort(cause error) {
	if t.closed.Load() || !t.aborting.CompareAndSwap(false, true) {
		return
	}
	if cause == nil {
		cause = transport.ErrAborted
	}
	t.cfg.Logger.Error("transport: MPI: aborting the job", "rank", t.rank, "cause", cause)
	t.fail(fmt.Errorf("%w: %w", transport.ErrAborted, cause))
	news := transport.AbortNews(t.rank, cause)
	for p := range t.world {
		if p == t.rank {
			continue
		}
		op := newOp(p, 0)
		op.hdr, op.hdone = newCbuf(mpiNewsLen), true
		n := encodeMPINews(op.hdr.bytes(), news)
		if code := C.ppg_isend(op.hdr.p, C.int(n), C.int(p), C.int(mpiAbortTag), 0, op.preq); code != C.MPI_SUCCESS {
			t.leak(op)
			continue
		}
		t.mu.Lock()
		t.pending = append(t.pending, op)
		t.npending.Store(int32(len(t.pending)))
		t.mu.Unlock()
	}
	time.Sleep(t.cfg.AbortLinger)
	C.ppg_abort(1)
	// MPI_Abort should not return; if it does, the process must not go on
	// as if the job were alive.
	os.Exit(1)
}
