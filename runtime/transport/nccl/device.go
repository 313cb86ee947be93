//go:build linux && (amd64 || arm64)

package nccl

import (
	"fmt"
	"runtime"
	"time"

	"github.com/ppgen/ppgen/runtime/internal/nap"
	"github.com/ppgen/ppgen/runtime/transport"
)

// dcomm is one NCCL communicator with the stream its work runs on and its
// device buffer: the world's (Send, Recv, Batch) or a group's (collectives,
// coll.go). Each has its own stream, so that a collective waiting for its
// members does not hold up the point-to-point transfers queued behind it,
// nor the reverse.
type dcomm struct {
	// sem (one slot) guards every call that uses handle, and gone: the
	// communicator is not used once aborted or destroyed.
	sem    chan struct{}
	handle uintptr
	gone   bool
	stream uintptr
	// arena is the device buffer (arenaLen bytes). outgrown holds the
	// buffers it outgrew, freed at Close: cudaFree synchronizes the whole
	// device, which would wait for another communicator's pending kernel.
	arena, arenaLen uintptr
	outgrown        []uintptr
	// what names the communicator in errors and logs: "" for the world's,
	// "group of world ranks [...]" for a group's.
	what string
}

func newDcomm(what string) *dcomm { return &dcomm{sem: make(chan struct{}, 1), what: what} }

// comms returns the world's communicator and every group's.
func (t *Transport) comms() []*dcomm {
	t.groupsMu.Lock()
	defer t.groupsMu.Unlock()
	cs := []*dcomm{t.wc}
	for _, g := range t.groups {
		cs = append(cs, g.c)
	}
	return cs
}

// onDevice runs f on one OS thread whose current CUDA device is this
// rank's: the CUDA runtime's current device and NCCL's group state are
// per thread, and a goroutine may change threads between calls.
func (t *Transport) onDevice(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := t.lib.cudaErr("cudaSetDevice", t.lib.cudaSetDevice(int32(t.device))); err != nil {
		return fmt.Errorf("device %d: %w", t.device, err)
	}
	return f()
}

// ensureArena makes c's device buffer at least n bytes (grown to the next
// power of two from 1 MiB; the outgrown one is kept until Close).
func (t *Transport) ensureArena(c *dcomm, n uintptr) error {
	if n <= c.arenaLen {
		return nil
	}
	size := uintptr(1 << 20)
	for size < n {
		size *= 2
	}
	l := t.lib
	var p uintptr
	if err := l.cudaErr(fmt.Sprintf("cudaMalloc of %d bytes on device %d", size, t.device), l.cudaMalloc(&p, size)); err != nil {
		return err
	}
	if c.arena != 0 {
		c.outgrown = append(c.outgrown, c.arena)
	}
	c.arena, c.arenaLen = p, size
	return nil
}

// abortComm calls ncclCommAbort once on c. It waits at most a second for
// an operation issuing calls on the communicator (ncclGroupEnd may block,
// and ending a blocked call is what ncclCommAbort is for).
func (t *Transport) abortComm(c *dcomm) {
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	held := false
	select {
	case c.sem <- struct{}{}:
		held = true
	case <-timer.C:
	}
	if !c.gone && c.handle != 0 {
		c.gone = true
		if r := t.lib.ncclCommAbort(c.handle); r != ncclSuccess {
			t.log.Warn("ncclCommAbort failed", "rank", t.rank, "communicator", c.what, "err", t.lib.ncclErr("ncclCommAbort", r))
		}
	}
	if held {
		<-c.sem
	}
}

// abortComms aborts every communicator: the world's and the groups'.
func (t *Transport) abortComms() {
	for _, c := range t.comms() {
		t.abortComm(c)
	}
}

// destroy destroys c's communicator (ncclCommDestroy) unless it was
// aborted, and, when free, its device buffers and stream (not after a
// failure: a stream of an aborted communicator may still be busy).
func (t *Transport) destroy(c *dcomm, free bool) error {
	c.sem <- struct{}{}
	var err error
	if !c.gone && c.handle != 0 {
		c.gone = true
		err = t.lib.ncclErr("ncclCommDestroy", t.lib.ncclCommDestroy(c.handle))
	}
	<-c.sem
	if !free || t.lib == nil {
		return err
	}
	_ = t.onDevice(func() error {
		for _, p := range append(c.outgrown, c.arena) {
			if p != 0 {
				_ = t.lib.cudaFree(p)
			}
		}
		c.arena, c.arenaLen, c.outgrown = 0, 0, nil
		if c.stream != 0 {
			_ = t.lib.cudaStreamDestroy(c.stream)
			c.stream = 0
		}
		return nil
	})
	return err
}

// waitStream polls c's stream until its work is done, the transport fails,
// or the progress timeout passes: then stuck's error is returned (stuck
// fails the transport).
func (t *Transport) waitStream(c *dcomm, stuck func() error) error {
	deadline := time.Now().Add(t.cfg.TCP.Timeout)
	pause := 5 * time.Microsecond
	for {
		r := t.lib.cudaStreamQuery(c.stream)
		if r == cudaSuccess {
			if t.isFailed() {
				return t.err // aborted: what the stream holds is not to be trusted
			}
			return nil
		}
		if r != cudaErrorNotReady {
			return t.lib.cudaErr("cudaStreamQuery", r)
		}
		if t.isFailed() {
			return t.err
		}
		if time.Now().After(deadline) {
			return stuck()
		}
		nap.Sleep(pause) // time.Sleep rounds sub-millisecond sleeps up to ~1 ms
		if pause < time.Millisecond {
			pause *= 2
		}
	}
}

// issueOn runs calls (NCCL calls that queue work on c's stream) holding c's
// semaphore. A call may block (NCCL connects ranks at their first
// operation, ncclGroupEnd waits for its group's connections): past the
// progress timeout stuck fails the transport, which aborts the
// communicator and so ends the call.
func (t *Transport) issueOn(c *dcomm, stuck func(), calls func() error) error {
	c.sem <- struct{}{}
	defer func() { <-c.sem }()
	if c.gone {
		return t.errOr(transport.ErrAborted)
	}
	timer := time.AfterFunc(t.cfg.TCP.Timeout, func() {
		defer t.catch("issue timer")
		stuck()
	})
	defer timer.Stop()
	return calls()
}
