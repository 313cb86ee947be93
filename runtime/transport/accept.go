package transport

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Bounds of the listeners of the connection phase (issue 35): a flood of
// connections costs this rank at most maxPendingHandshakes handshakes at
// once and one log line per refusalLogEvery, and running out of file
// descriptors (EMFILE) pauses the accept loop instead of ending it.
const (
	// maxPendingHandshakes caps the handshakes a listener runs at once; a
	// connection beyond it is closed at once (a real rank retries: see
	// dialShake).
	maxPendingHandshakes = 64
	// refusalLogEvery is the least time between two refusal log lines; the
	// refusals in between are counted in the next line (suppressed=N) or in
	// a last line when the rendezvous ends.
	refusalLogEvery = time.Second
	// Accept's backoff after an error (EMFILE, ENFILE, ECONNABORTED, ...):
	// doubling from acceptBackoffMin to acceptBackoffMax, as net/http's
	// server does.
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptLoop accepts connections on ln until it is closed, each handshake
// (final, purpose, check: see shakeListener, with the connection) in its own
// goroutine under r's deadlines, at most maxPendingHandshakes at once: a
// refused connection is told why and dropped, one that passed gets the
// rendezvous deadline, and every outcome but a refusal goes to deliver. An
// Accept error other than a closed listener (out of file descriptors) is
// logged, rate-limited, and retried after a backoff. A panic of the loop,
// named loop, goes to fail; one of a handshake is its outcome's error.
func (t *TCP) acceptLoop(r *rdv, ln net.Listener, loop string, final bool, purpose string, check func(net.Conn, hello) string, fail func(error), deliver func(net.Conn, shakeOutcome)) {
	defer t.catch(loop, fail)
	hook("accept")
	pending := make(chan struct{}, maxPendingHandshakes)
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
			t.acceptFailed(r, err, backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		select {
		case pending <- struct{}{}:
		default:
			t.refused(r, c, fmt.Errorf("%d handshakes already under way (at most %d at once): closed at once", maxPendingHandshakes, maxPendingHandshakes))
			c.Close()
			continue
		}
		r.track(c, t.handshakeDeadline(r))
		go func() {
			defer func() { <-pending }()
			var out shakeOutcome
			func() {
				defer t.catch(fmt.Sprintf("handshake with %s", c.RemoteAddr()), func(err error) { out = shakeOutcome{err: err} })
				hook("handshake")
				out = t.shakeListener(c, final, purpose, func(h hello) string { return check(c, h) })
			}()
			if out.refused {
				t.refused(r, c, out.err)
				r.drop(c)
				return
			}
			if out.err == nil {
				r.extend(c)
				t.sessions.Store(c, out.keys)
			}
			deliver(c, out)
		}()
	}
}

// refused logs a connection dropped before it proved the token, under
// the rate limit (logLine).
func (t *TCP) refused(r *rdv, c net.Conn, err error) {
	r.mu.Lock()
	r.refusals++
	r.lastRefusal = fmt.Sprintf("from %s: %v", c.RemoteAddr(), err)
	r.mu.Unlock()
	t.logLine(r, "transport: refused a connection", "rank", t.rank, "from", c.RemoteAddr().String(), "reason", err.Error())
}

// acceptFailed logs an Accept error, under the rate limit (logLine).
func (t *TCP) acceptFailed(r *rdv, err error, backoff time.Duration) {
	t.logLine(r, "transport: accepting a connection failed (out of file descriptors?); still serving", "rank", t.rank, "err", err.Error(), "retry_in", backoff)
}

// logLine logs a warning of the connection phase, at most one per
// refusalLogEvery: a line carries how many were held back since the
// previous one (suppressed=N); flushRefusals logs the rest at the end.
func (t *TCP) logLine(r *rdv, msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.lastLogged) < refusalLogEvery {
		r.unlogged++
		r.mu.Unlock()
		return
	}
	suppressed := r.unlogged
	r.lastLogged, r.unlogged = now, 0
	r.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	t.log.Warn(msg, args...)
}

// flushRefusals logs how many lines the rate limit held back since the
// last one, when the connection phase ends.
func (t *TCP) flushRefusals(r *rdv) {
	r.mu.Lock()
	n := r.unlogged
	r.unlogged = 0
	r.mu.Unlock()
	if n > 0 {
		t.log.Warn("transport: refusals and accept errors not logged (at most one line per second)", "rank", t.rank, "suppressed", n)
	}
}
