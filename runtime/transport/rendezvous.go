package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The connection phase. Rank 0 listens at MasterAddr; every other rank dials
// it (the rendezvous connection), handshakes (see handshake.go) and reports
// the address it listens on for peers. When every rank has joined, rank 0
// sends each the table of addresses; every pair of ranks >= 1 then connects
// (the lower dials the higher) and handshakes; each rank reports to rank 0
// whether it connected to every peer, and rank 0 answers "all ready" or why
// the world aborted. Then every connection carries frames.

// defaultAbortLinger is TCPConfig.AbortLinger's default.
const defaultAbortLinger = 10 * time.Second

// rdv bounds every connection and listener of the connection phase by the
// context: its deadline applies to each, and cancellation expires them.
// When the phase ends, closeOthers closes every connection it does not
// keep (handshakes still running, silent connections).
type rdv struct {
	deadline time.Time
	mu       sync.Mutex
	fired    bool
	conns    map[net.Conn]struct{}
	lns      []net.Listener

	// Connections refused before they proved the token, and the refusal
	// log's rate limit (refused).
	refusals    int
	lastRefusal string
	lastLogged  time.Time
	unlogged    int // lines held back since lastLogged (logLine)
}

var expired = time.Unix(1, 0)

// track bounds c by the rendezvous and, when until is not zero, by until
// (a handshake deadline).
func (r *rdv) track(c net.Conn, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.fired:
		_ = c.SetDeadline(expired)
	case !until.IsZero():
		_ = c.SetDeadline(until)
	default:
		_ = c.SetDeadline(r.deadline)
	}
	r.conns[c] = struct{}{}
}

// extend lifts a handshake deadline: c is bounded by the rendezvous only.
func (r *rdv) extend(c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.fired {
		_ = c.SetDeadline(r.deadline)
	}
}

// drop closes c and forgets it.
func (r *rdv) drop(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

func (r *rdv) trackListener(ln net.Listener) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fired {
		ln.Close()
	}
	r.lns = append(r.lns, ln)
}

func (r *rdv) fire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fired = true
	for c := range r.conns {
		_ = c.SetDeadline(expired)
	}
	for _, ln := range r.lns {
		ln.Close()
	}
}

// closeOthers closes every listener and every tracked connection not in
// keep, so that nothing accepted during the rendezvous outlives it.
func (r *rdv) closeOthers(keep []net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fired = true
	kept := make(map[net.Conn]bool, len(keep))
	for _, c := range keep {
		if c != nil {
			kept[c] = true
		}
	}
	for c := range r.conns {
		if !kept[c] {
			c.Close()
		}
	}
	clear(r.conns)
	for _, ln := range r.lns {
		ln.Close()
	}
}

// refusalNote summarizes the refused connections for a timeout error.
func (r *rdv) refusalNote() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refusals == 0 {
		return ""
	}
	return fmt.Sprintf("; %d connection(s) were refused in the handshake, the last %s", r.refusals, r.lastRefusal)
}

func newRdv(ctx context.Context) (*rdv, func() bool) {
	d, _ := ctx.Deadline()
	r := &rdv{deadline: d, conns: make(map[net.Conn]struct{})}
	return r, context.AfterFunc(ctx, r.fire)
}

func missing(conns []net.Conn, self int) []int {
	var m []int
	for r, c := range conns {
		if r != self && c == nil {
			m = append(m, r)
		}
	}
	return m
}

func (t *TCP) rendezvousMaster(ctx context.Context) (conns []net.Conn, err error) {
	r, stop := newRdv(ctx)
	defer func() { r.closeOthers(conns); t.flushRefusals(r) }() // runs last: after the linger below
	defer func() {
		if !stop() && err == nil {
			err = fmt.Errorf("%w: %v", ErrTimeout, ctx.Err())
		}
	}()
	ln := t.cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", t.cfg.MasterAddr); err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
	}
	// told records the ranks that learned the rendezvous failed (they got
	// the reason, or were the ones refused); toldAll is closed when every
	// other rank has.
	var toldMu sync.Mutex
	told := make(map[int]bool)
	toldAll := make(chan struct{})
	tell := func(rank int) {
		toldMu.Lock()
		defer toldMu.Unlock()
		if rank <= 0 || rank >= t.world || told[rank] {
			return
		}
		told[rank] = true
		if len(told) == t.world-1 {
			close(toldAll)
		}
	}
	defer func() {
		if err == nil {
			ln.Close()
			return
		}
		// Keep answering ranks that arrive late with the reason the
		// rendezvous failed (instead of "connection refused" until their
		// timeout). The process usually exits as soon as DialTCP returns, so
		// linger until every rank has been told, bounded by the rendezvous
		// deadline and by AbortLinger.
		linger := min(time.Until(r.deadline), t.cfg.AbortLinger)
		select {
		case <-toldAll:
		case <-time.After(linger):
		}
		ln.Close()
	}()
	r.trackListener(ln)

	conns = make([]net.Conn, t.world)
	addrs := make([]string, t.world)
	type result struct {
		c net.Conn
		shakeOutcome
	}
	results := make(chan result)
	done := make(chan struct{})
	defer close(done)
	var aborted atomic.Pointer[string] // set before done is closed on failure
	go t.acceptLoop(r, ln, "rendezvous accept loop", false, purposeRendezvous,
		func(c net.Conn, h hello) string {
			if h.Addr == "" {
				return fmt.Sprintf("rank %d at %s sent no address to reach it at", h.Rank, c.RemoteAddr())
			}
			return ""
		},
		func(err error) {
			select {
			case results <- result{shakeOutcome: shakeOutcome{err: err}}:
			case <-done:
			}
		},
		func(c net.Conn, out shakeOutcome) {
			select {
			case results <- result{c, out}:
			case <-done:
				// The rendezvous already ended: tell a rank that passed
				// its handshake why, instead of just hanging up.
				if reason := aborted.Load(); reason != nil {
					if out.err == nil {
						_ = writeMsg(c, verdict{Err: *reason})
					}
					tell(out.h.Rank)
				}
				r.drop(c)
			}
		})
	abortAll := func(reason string) {
		reason = "rendezvous aborted by rank 0: " + strings.TrimPrefix(reason, ErrHandshake.Error()+": ")
		aborted.Store(&reason)
		for p, c := range conns {
			if c != nil {
				_ = writeMsg(c, verdict{Err: reason})
				tell(p)
			}
		}
	}
	// Stop waiting a little before the rendezvous deadline, so that the
	// ranks that did join still hear why it failed.
	margin := min(time.Second, t.cfg.RendezvousTimeout/10)
	joinBy := time.NewTimer(time.Until(r.deadline) - margin)
	defer joinBy.Stop()
	for got := 0; got < t.world-1; {
		select {
		case <-joinBy.C:
			err := fmt.Errorf("%w: ranks %v did not join within %v%s", ErrTimeout, missing(conns, 0), t.cfg.RendezvousTimeout, r.refusalNote())
			abortAll(err.Error())
			return conns, err
		case <-ctx.Done():
			err := fmt.Errorf("%w: ranks %v did not join within %v%s", ErrTimeout, missing(conns, 0), t.cfg.RendezvousTimeout, r.refusalNote())
			abortAll(err.Error())
			return conns, err
		case res := <-results:
			if res.c == nil { // the accept loop panicked
				abortAll(res.err.Error())
				return conns, res.err
			}
			if res.err != nil {
				r.drop(res.c)
				tell(res.h.Rank) // it was refused, and knows why
				abortAll(res.err.Error())
				return conns, res.err
			}
			if prev := conns[res.h.Rank]; prev != nil {
				reason := fmt.Sprintf("two processes claim rank %d (%s and %s)", res.h.Rank, prev.RemoteAddr(), res.c.RemoteAddr())
				_ = writeMsg(res.c, verdict{Err: reason})
				r.drop(res.c)
				tell(res.h.Rank)
				abortAll(reason)
				return conns, fmt.Errorf("%w: %s", ErrHandshake, reason)
			}
			conns[res.h.Rank], addrs[res.h.Rank] = res.c, res.h.Addr
			got++
			t.log.Debug("rank joined", "rank", t.rank, "peer", res.h.Rank, "addr", res.h.Addr)
		}
	}
	for p, c := range conns {
		if c != nil {
			if err := writeMsg(c, verdict{Addrs: addrs}); err != nil {
				reason := fmt.Sprintf("rank %d at %s dropped out of the rendezvous: %v", p, c.RemoteAddr(), err)
				abortAll(reason)
				return conns, errors.New(reason)
			}
		}
	}
	// Barrier: every rank reports whether it connected to all its peers.
	type ack struct {
		rank int
		err  error
		msg  string
	}
	acks := make(chan ack, t.world)
	for p, c := range conns {
		if c != nil {
			go func() {
				defer t.catch(fmt.Sprintf("rendezvous reader for peer %d", p), func(err error) { acks <- ack{p, err, ""} })
				hook("barrier")
				v, err := readVerdict(c)
				acks <- ack{p, err, v.Err}
			}()
		}
	}
	failure := ""
	for range t.world - 1 {
		a := <-acks
		if a.err != nil {
			failure = fmt.Sprintf("rank %d dropped out of the rendezvous: %v", a.rank, a.err)
		} else if a.msg != "" {
			failure = fmt.Sprintf("rank %d: %s", a.rank, a.msg)
		}
		if failure != "" {
			break
		}
	}
	if failure != "" {
		abortAll(failure)
		return conns, errors.New(failure)
	}
	for p, c := range conns {
		if c != nil {
			if err := writeMsg(c, verdict{}); err != nil {
				return conns, fmt.Errorf("rank %d dropped out of the rendezvous: %v", p, err)
			}
		}
	}
	return conns, nil
}

func (t *TCP) rendezvousWorker(ctx context.Context) (conns []net.Conn, err error) {
	r, stop := newRdv(ctx)
	defer func() { r.closeOthers(conns); t.flushRefusals(r) }()
	defer func() {
		if !stop() && err == nil {
			err = fmt.Errorf("%w: %v", ErrTimeout, ctx.Err())
		}
	}()
	conns = make([]net.Conn, t.world)
	mc, err := dialRetry(ctx, t.cfg.MasterAddr)
	if err != nil {
		return conns, fmt.Errorf("cannot reach rank 0: %w", err)
	}
	r.track(mc, t.handshakeDeadline(r))
	conns[0] = mc

	host := t.cfg.ListenHost
	if host == "" {
		if a, ok := mc.LocalAddr().(*net.TCPAddr); ok {
			host = a.IP.String()
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return conns, fmt.Errorf("listen for peers: %w", err)
	}
	r.trackListener(ln)
	defer ln.Close()
	hook("peer listener " + ln.Addr().String())

	mc, keys, err := t.shakeRetry(ctx, r, mc, t.cfg.MasterAddr, t.hello(purposeRendezvous, ln.Addr().String()), 0)
	conns[0] = mc
	if err != nil {
		return conns, err
	}
	t.sessions.Store(mc, keys)
	r.extend(mc)
	table, err := readVerdict(mc)
	if err != nil {
		if errors.Is(err, errNotPpgen) {
			return conns, err
		}
		return conns, fmt.Errorf("waiting for the other ranks: %w", err)
	}
	if table.Err != "" {
		return conns, fmt.Errorf("%w: %s", ErrHandshake, table.Err)
	}
	if len(table.Addrs) != t.world {
		return conns, fmt.Errorf("%w: rank 0 sent %d addresses for a world of %d", ErrProtocol, len(table.Addrs), t.world)
	}

	// Peer phase: dial every higher rank, accept every lower one but 0.
	type masterMsg struct {
		v   verdict
		err error
	}
	fromMaster := make(chan masterMsg, 1)
	go func() {
		defer t.catch("rendezvous reader for peer 0", func(err error) { fromMaster <- masterMsg{err: err} })
		hook("master reader")
		v, err := readVerdict(mc)
		fromMaster <- masterMsg{v, err}
	}()
	type result struct {
		rank int
		c    net.Conn
		err  error
	}
	results := make(chan result)
	done := make(chan struct{})
	defer close(done)
	send := func(res result) {
		select {
		case results <- res:
		case <-done:
			if res.c != nil {
				r.drop(res.c)
			}
		}
	}
	for j := t.rank + 1; j < t.world; j++ {
		go func() {
			defer t.catch(fmt.Sprintf("dialer of peer %d", j), func(err error) { send(result{j, nil, err}) })
			hook("dialer")
			c, err := dialRetry(ctx, table.Addrs[j])
			if err != nil {
				send(result{j, nil, fmt.Errorf("cannot reach rank %d at %s: %w", j, table.Addrs[j], err)})
				return
			}
			r.track(c, t.handshakeDeadline(r))
			c, keys, err := t.shakeRetry(ctx, r, c, table.Addrs[j], t.hello(purposePeer, ""), j)
			if err != nil {
				send(result{j, c, err})
				return
			}
			t.sessions.Store(c, keys)
			v, err := readVerdict(c)
			if err != nil {
				send(result{j, c, fmt.Errorf("rank %d at %s dropped the handshake: %w", j, c.RemoteAddr(), err)})
				return
			}
			if v.Err != "" {
				send(result{j, c, fmt.Errorf("%w: rank %d at %s refused this rank: %s", ErrHandshake, j, c.RemoteAddr(), v.Err)})
				return
			}
			r.extend(c)
			send(result{j, c, nil})
		}()
	}
	if t.rank > 1 {
		var mu sync.Mutex
		seen := make([]bool, t.rank)
		go t.acceptLoop(r, ln, "peer accept loop", true, purposePeer,
			func(c net.Conn, h hello) string {
				if h.Rank < 1 || h.Rank >= t.rank {
					return fmt.Sprintf("rank %d at %s dialed rank %d, but only ranks 1..%d dial it", h.Rank, c.RemoteAddr(), t.rank, t.rank-1)
				}
				mu.Lock()
				defer mu.Unlock()
				if seen[h.Rank] {
					return fmt.Sprintf("two processes claim rank %d (second from %s)", h.Rank, c.RemoteAddr())
				}
				seen[h.Rank] = true
				return ""
			},
			func(err error) { send(result{-1, nil, err}) },
			func(c net.Conn, out shakeOutcome) { send(result{out.h.Rank, c, out.err}) })
	}
	report := func(err error) ([]net.Conn, error) {
		_ = writeMsg(mc, verdict{Err: err.Error()})
		return conns, err
	}
	for need := t.world - 2; need > 0; {
		select {
		case res := <-results:
			if res.err != nil {
				if res.c != nil {
					r.drop(res.c)
				}
				return report(res.err)
			}
			conns[res.rank] = res.c
			need--
		case m := <-fromMaster:
			if m.err != nil {
				return conns, fmt.Errorf("rank 0 closed the connection during the rendezvous: %w", m.err)
			}
			return conns, fmt.Errorf("%w: %s", ErrHandshake, m.v.Err)
		case <-ctx.Done():
			return report(fmt.Errorf("%w: ranks %v did not connect within %v%s", ErrTimeout, missing(conns, t.rank), t.cfg.RendezvousTimeout, r.refusalNote()))
		}
	}
	ln.Close()
	if err := writeMsg(mc, verdict{}); err != nil {
		return conns, fmt.Errorf("rank 0 closed the connection during the rendezvous: %w", err)
	}
	m := <-fromMaster
	if m.err != nil {
		return conns, fmt.Errorf("rank 0 closed the connection during the rendezvous: %w", m.err)
	}
	if m.v.Err != "" {
		return conns, fmt.Errorf("%w: %s", ErrHandshake, m.v.Err)
	}
	return conns, nil
}

// shakeRetry runs the dialer's handshake on c, a connection to addr; while
// the listener closes connections before its challenge (errBusy: it had
// maxPendingHandshakes handshakes under way, some perhaps an outsider's),
// it dials again with a backoff, until ctx ends. It returns the last
// connection (nil when a dial failed).
func (t *TCP) shakeRetry(ctx context.Context, r *rdv, c net.Conn, addr string, me hello, want int) (net.Conn, *frameKeys, error) {
	backoff := 10 * time.Millisecond
	for {
		_, keys, err := t.shakeDialer(c, me, want)
		if !errors.Is(err, errBusy) || ctx.Err() != nil {
			return c, keys, err
		}
		r.drop(c)
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
		if c, err = dialRetry(ctx, addr); err != nil {
			return nil, nil, err
		}
		r.track(c, t.handshakeDeadline(r))
	}
}

// dialRetry dials addr until it answers or ctx ends (the peer may not be
// listening yet).
func dialRetry(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	backoff := 10 * time.Millisecond
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %s did not answer: %v", ErrTimeout, addr, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %s did not answer: %v", ErrTimeout, addr, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}
