//go:build linux && (amd64 || arm64)

package nccl

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/ppgen/ppgen/runtime/transport"
)

func (t *Transport) isFailed() bool {
	select {
	case <-t.failed:
		return true
	default:
		return false
	}
}

// fail records the transport's first error and aborts the communicators
// (the world's and the groups'), so that every pending operation ends.
func (t *Transport) fail(err error) {
	if t.record(err, nil) {
		t.abortComms()
	}
}

// failAndTell is fail for a failure of this rank that breaks the
// communicator: the peers are told over the control connection (they fail
// naming this rank) before the communicator is aborted.
func (t *Transport) failAndTell(err error) {
	if t.record(err, err) {
		t.abortComms()
	}
}

// record sets the transport's error if it is the first, and then tells the
// peers (ctl.Abort(tell)) unless tell is nil, before any operation can
// return the error: a rank that closes after its failure cannot close the
// control connection before the news went out. It reports whether err was
// the first.
func (t *Transport) record(err, tell error) bool {
	first := false
	t.failOnce.Do(func() {
		t.err = err
		if tell != nil {
			t.ctl.Abort(tell)
		}
		close(t.failed)
		first = true
	})
	if first && !t.closing.Load() {
		t.log.Debug("NCCL transport failed", "rank", t.rank, "err", err)
	}
	return first
}

// catch, deferred at the top of every goroutine, turns a panic into the
// rank's error (wrapping transport.ErrPanicked) and aborts the rank.
func (t *Transport) catch(what string) {
	v := recover()
	if v == nil {
		return
	}
	err := fmt.Errorf("NCCL transport %s %w: %v", what, transport.ErrPanicked, v)
	t.log.Error("NCCL transport goroutine panicked", "rank", t.rank, "goroutine", what, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	t.failAndTell(err)
}

// testHook, set by tests, is called at the start of every goroutine with
// its name ("watchdog", "watch peer"), to inject panics.
var testHook atomic.Pointer[func(site string)]

func hook(site string) {
	if f := testHook.Load(); f != nil {
		(*f)(site)
	}
}

// watchdog polls the communicators' asynchronous errors (the world's and
// the groups'). An error fails the transport, aborts the communicators and
// the control connection: every peer learns that this rank failed and why.
func (t *Transport) watchdog() {
	defer t.wg.Done()
	defer t.catch("watchdog")
	hook("watchdog")
	tick := time.NewTicker(t.cfg.WatchInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-t.failed:
			return
		case <-tick.C:
		}
		for _, c := range t.comms() {
			if res := t.asyncError(c); res != ncclSuccess {
				t.asyncFailed(c, res)
				return
			}
		}
	}
}

// asyncError polls c's asynchronous error (ncclSuccess also while an
// operation is inside a call on c, which may block there: the next tick
// polls).
func (t *Transport) asyncError(c *dcomm) int32 {
	select {
	case c.sem <- struct{}{}:
	default:
		return ncclSuccess
	}
	res := int32(ncclSuccess)
	r := int32(ncclSuccess)
	if !c.gone && c.handle != 0 {
		r = t.lib.ncclCommGetAsyncError(c.handle, &res)
	}
	<-c.sem
	if r != ncclSuccess {
		res = r
	}
	if res == ncclInProgress {
		return ncclSuccess
	}
	return res
}

// asyncFailed fails the transport for c's asynchronous error res, and tells
// the peers. ncclRemoteError (a peer failed) first waits a moment for the
// control connection to name that peer.
func (t *Transport) asyncFailed(c *dcomm, res int32) {
	cerr := t.lib.ncclErr("ncclCommGetAsyncError", res)
	where := fmt.Sprintf("device %d", t.device)
	if c.what != "" {
		where += " (" + c.what + ")"
	}
	if res == ncclRemoteError {
		grace := time.NewTimer(t.cfg.TCP.HeartbeatTimeout + time.Second)
		select {
		case <-t.failed:
		case <-t.stop:
		case <-grace.C:
		}
		grace.Stop()
		if t.isFailed() || t.closing.Load() {
			return
		}
		err := fmt.Errorf("NCCL reported a remote error on %s (a peer failed or the network broke; no peer reported over the control connection): %w", where, cerr)
		t.failAndTell(err)
		return
	}
	err := fmt.Errorf("NCCL asynchronous error on %s: %w", where, cerr)
	t.log.Error("NCCL communicator failed, aborting", "rank", t.rank, "err", err)
	t.failAndTell(err) // peers first: they learn who failed before the connections break
}

// watchPeer waits on the control connection's watch channel, where nothing
// is sent: the wait ends only when the connection fails (the peer aborted,
// died or hung: the error names it) or closes.
func (t *Transport) watchPeer(p int) {
	defer t.wg.Done()
	defer t.catch(fmt.Sprintf("watcher of peer %d", p))
	hook("watch peer")
	for {
		_, _, err := t.ctl.Recv(p, watchCh)
		var pe *transport.ProgressError
		switch {
		case err == nil:
			continue // nothing is sent there; ignore
		case errors.As(err, &pe):
			select {
			case <-t.stop:
				return
			default:
				continue
			}
		case t.closing.Load():
			return
		}
		if t.ctlFailed(p, err) {
			t.peerGone[p].Store(true)
		}
		return
	}
}

// ctlFailed handles an error of the control connection from peer p: it
// reports whether p said goodbye (closed in order; the control connection's
// own wording for it, while a peer that died is "closed the connection
// (EOF)" and fails the whole connection). Otherwise the peer (or another,
// relayed) failed: the pending operations end, and the news is relayed
// before this rank's connections close, so every rank names the rank at the
// origin.
func (t *Transport) ctlFailed(p int, err error) (goodbye bool) {
	var peerErr *transport.PeerError
	if !errors.As(err, &peerErr) {
		t.failAndTell(err)
		return false
	}
	if peerErr.Peer == p && !peerErr.Relayed && peerErr.Reason == "closed the connection" && errors.Is(err, transport.ErrPeerClosed) {
		return true
	}
	t.failAndTell(peerErr)
	return false
}

func (t *Transport) stopAll() { t.stopOnce.Do(func() { close(t.stop) }) }

// errOf is the error an operation returns for err: the transport's first
// error when it failed (a progress error, a peer's failure), else err.
func errOf(err error, t *Transport) error {
	var pe *transport.ProgressError
	if errors.As(err, &pe) {
		return err
	}
	if t.isFailed() {
		return t.err
	}
	return err
}

func (t *Transport) errOr(def error) error {
	if t.isFailed() {
		return t.err
	}
	return def
}
