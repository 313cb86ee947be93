package transport

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The connection phase.
//
// Every connection starts with a four-message handshake between the dialer D
// and the listener L, each message a 4-byte big-endian length and JSON:
//
//	D -> L  hello{proto, purpose, rank, world, fingerprint, addr, nonceD}
//	L -> D  hello{..., nonceL}, proof{HMAC(token, "L"|nonceD|nonceL), objection}
//	D -> L  proof{HMAC(token, "D"|nonceD|nonceL), objection}
//	L -> D  verdict{err, addrs}
//
// Each side checks the other's hello (protocol, world size, rank, schedule
// fingerprint) and MAC, so both report a mismatch in their own words. On the
// rendezvous connection (rank r -> rank 0) the verdict is delayed until every
// rank has joined and carries the table of listen addresses; two more
// verdicts follow (r -> 0: "connected to every peer" or why not; 0 -> r: "all
// ready" or why the world aborted). Then the connection carries frames.

const protoName = "ppgen-tcp/1"

const (
	purposeRendezvous = "rendezvous"
	purposePeer       = "peer"
	maxHandshakeMsg   = 1 << 20
)

type hello struct {
	Proto       string `json:"proto"`
	Purpose     string `json:"purpose"`
	Rank        int    `json:"rank"`
	World       int    `json:"world"`
	Fingerprint string `json:"fingerprint"`
	Addr        string `json:"addr,omitempty"`
	Nonce       []byte `json:"nonce"`
}

type proof struct {
	MAC []byte `json:"mac"`
	Err string `json:"err,omitempty"`
}

type verdict struct {
	Err   string   `json:"err,omitempty"`
	Addrs []string `json:"addrs,omitempty"`
}

var errNotPpgen = errors.New("not a ppgen handshake")

// defaultAbortLinger is TCPConfig.AbortLinger's default.
const defaultAbortLinger = 10 * time.Second

func writeMsg(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = c.Write(buf)
	return err
}

func readMsg(c net.Conn, v any) error {
	var l [4]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > maxHandshakeMsg {
		return fmt.Errorf("%w (message of %d bytes)", errNotPpgen, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", errNotPpgen, err)
	}
	return nil
}

func (t *TCP) hello(purpose, addr string) hello {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	return hello{Proto: protoName, Purpose: purpose, Rank: t.rank, World: t.world, Fingerprint: t.cfg.Fingerprint, Addr: addr, Nonce: nonce}
}

func (t *TCP) mac(role string, nonceD, nonceL []byte) []byte {
	m := hmac.New(sha256.New, []byte(t.cfg.Token))
	m.Write([]byte(protoName + "|" + role + "|"))
	m.Write(nonceD)
	m.Write(nonceL)
	return m.Sum(nil)
}

func showFP(fp string) string {
	if fp == "" {
		return "(none)"
	}
	return fp
}

// check returns why this rank refuses a peer's hello, or "".
func (t *TCP) check(h hello, want int) string {
	switch {
	case h.Proto != protoName:
		return fmt.Sprintf("rank %d speaks protocol %q, this rank (%d) speaks %q", h.Rank, h.Proto, t.rank, protoName)
	case want >= 0 && h.Rank != want:
		return fmt.Sprintf("expected rank %d there, but rank %d answered", want, h.Rank)
	case h.World != t.world:
		return fmt.Sprintf("rank %d runs with world size %d, this rank (%d) with %d", h.Rank, h.World, t.rank, t.world)
	case h.Rank < 0 || h.Rank >= t.world:
		return fmt.Sprintf("a peer claims rank %d, outside [0, %d)", h.Rank, t.world)
	case h.Rank == t.rank:
		return fmt.Sprintf("a peer claims rank %d, which is this rank", h.Rank)
	case h.Fingerprint != t.cfg.Fingerprint:
		return fmt.Sprintf("rank %d runs schedule fingerprint %s, this rank (%d) runs %s", h.Rank, showFP(h.Fingerprint), t.rank, showFP(t.cfg.Fingerprint))
	}
	return ""
}

func authFailure(peer int) string {
	return fmt.Sprintf("rank %d failed authentication: its shared token differs from this rank's (set the same token, e.g. PPGEN_TOKEN, on every rank)", peer)
}

// shakeDialer runs the dialer's first three messages and returns the
// listener's hello. The caller reads the verdict.
func (t *TCP) shakeDialer(c net.Conn, me hello, want int) (hello, error) {
	var h hello
	if err := writeMsg(c, me); err != nil {
		return h, fmt.Errorf("rank %d at %s: %w", want, c.RemoteAddr(), err)
	}
	var p proof
	if err := readMsg(c, &h); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return h, fmt.Errorf("%w: rank %d at %s accepted the connection but never answered the handshake (is it a ppgen rank, and still starting?): %v", ErrTimeout, want, c.RemoteAddr(), err)
		}
		return h, fmt.Errorf("rank %d at %s dropped the handshake (not a ppgen rank?): %w", want, c.RemoteAddr(), err)
	}
	if err := readMsg(c, &p); err != nil {
		return h, fmt.Errorf("rank %d at %s dropped the handshake: %w", want, c.RemoteAddr(), err)
	}
	objection := t.check(h, want)
	if objection == "" && !hmac.Equal(p.MAC, t.mac("L", me.Nonce, h.Nonce)) {
		objection = authFailure(h.Rank)
	}
	_ = writeMsg(c, proof{MAC: t.mac("D", me.Nonce, h.Nonce), Err: objection})
	if objection != "" {
		return h, fmt.Errorf("%w: %s", ErrHandshake, objection)
	}
	if p.Err != "" {
		return h, fmt.Errorf("%w: rank %d refused this rank: %s", ErrHandshake, h.Rank, p.Err)
	}
	return h, nil
}

// shakeListener runs the listener's side. junk reports a connection that is
// not a ppgen rank at all (ignored by the caller). accept adds
// caller-specific objections. With final, the accepting verdict is sent too.
func (t *TCP) shakeListener(c net.Conn, purpose string, final bool, accept func(hello) string) (h hello, err error, junk bool) {
	if err := readMsg(c, &h); err != nil || h.Proto == "" {
		return h, err, true
	}
	objection := t.check(h, -1)
	if objection == "" && h.Purpose != purpose {
		objection = fmt.Sprintf("rank %d connected for %q, expected %q", h.Rank, h.Purpose, purpose)
	}
	if objection == "" && accept != nil {
		objection = accept(h)
	}
	me := t.hello(purpose, "")
	if err := writeMsg(c, me); err != nil {
		return h, fmt.Errorf("rank %d dropped the handshake: %w", h.Rank, err), false
	}
	if err := writeMsg(c, proof{MAC: t.mac("L", h.Nonce, me.Nonce), Err: objection}); err != nil {
		return h, fmt.Errorf("rank %d dropped the handshake: %w", h.Rank, err), false
	}
	var p proof
	if err := readMsg(c, &p); err != nil {
		if objection != "" {
			return h, fmt.Errorf("%w: %s", ErrHandshake, objection), false
		}
		return h, fmt.Errorf("rank %d dropped the handshake: %w", h.Rank, err), false
	}
	if objection == "" && !hmac.Equal(p.MAC, t.mac("D", h.Nonce, me.Nonce)) {
		objection = authFailure(h.Rank)
	}
	if objection != "" {
		_ = writeMsg(c, verdict{Err: objection})
		return h, fmt.Errorf("%w: %s", ErrHandshake, objection), false
	}
	if p.Err != "" {
		return h, fmt.Errorf("%w: rank %d refused this rank: %s", ErrHandshake, h.Rank, p.Err), false
	}
	if final {
		if err := writeMsg(c, verdict{}); err != nil {
			return h, fmt.Errorf("rank %d dropped the handshake: %w", h.Rank, err), false
		}
	}
	return h, nil, false
}

// rdv bounds every connection and listener of the connection phase by the
// context: its deadline applies to each, and cancellation expires them.
type rdv struct {
	deadline time.Time
	mu       sync.Mutex
	fired    bool
	conns    []net.Conn
	lns      []net.Listener
}

var expired = time.Unix(1, 0)

func (r *rdv) track(c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fired {
		_ = c.SetDeadline(expired)
	} else {
		_ = c.SetDeadline(r.deadline)
	}
	r.conns = append(r.conns, c)
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
	for _, c := range r.conns {
		_ = c.SetDeadline(expired)
	}
	for _, ln := range r.lns {
		ln.Close()
	}
}

func newRdv(ctx context.Context) (*rdv, func() bool) {
	d, _ := ctx.Deadline()
	r := &rdv{deadline: d}
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
		c    net.Conn
		h    hello
		err  error
		junk bool
	}
	results := make(chan result)
	done := make(chan struct{})
	defer close(done)
	var aborted atomic.Pointer[string] // set before done is closed on failure
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.track(c)
			go func() {
				h, err, junk := t.shakeListener(c, purposeRendezvous, false, nil)
				select {
				case results <- result{c, h, err, junk}:
				case <-done:
					// The rendezvous already ended: tell a rank that passed
					// its handshake why, instead of just hanging up.
					if reason := aborted.Load(); reason != nil && !junk {
						if err == nil {
							_ = writeMsg(c, verdict{Err: *reason})
						}
						tell(h.Rank)
					}
					c.Close()
				}
			}()
		}
	}()
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
	for got := 0; got < t.world-1; {
		select {
		case <-ctx.Done():
			err := fmt.Errorf("%w: ranks %v did not join within %v", ErrTimeout, missing(conns, 0), t.cfg.RendezvousTimeout)
			abortAll(err.Error())
			return conns, err
		case res := <-results:
			if res.junk {
				t.log.Warn("ignoring a connection that is not a ppgen rank", "rank", t.rank, "from", res.c.RemoteAddr(), "err", res.err)
				res.c.Close()
				continue
			}
			if res.err != nil {
				res.c.Close()
				tell(res.h.Rank) // it was refused, and knows why
				abortAll(res.err.Error())
				return conns, res.err
			}
			if prev := conns[res.h.Rank]; prev != nil {
				reason := fmt.Sprintf("two processes claim rank %d (%s and %s)", res.h.Rank, prev.RemoteAddr(), res.c.RemoteAddr())
				_ = writeMsg(res.c, verdict{Err: reason})
				res.c.Close()
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
				reason := fmt.Sprintf("rank %d dropped out of the rendezvous: %v", p, err)
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
				var v verdict
				err := readMsg(c, &v)
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
	r.track(mc)
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

	if _, err := t.shakeDialer(mc, t.hello(purposeRendezvous, ln.Addr().String()), 0); err != nil {
		return conns, err
	}
	var table verdict
	if err := readMsg(mc, &table); err != nil {
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
		var v verdict
		err := readMsg(mc, &v)
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
				res.c.Close()
			}
		}
	}
	for j := t.rank + 1; j < t.world; j++ {
		go func() {
			c, err := dialRetry(ctx, table.Addrs[j])
			if err != nil {
				send(result{j, nil, fmt.Errorf("cannot reach rank %d at %s: %w", j, table.Addrs[j], err)})
				return
			}
			r.track(c)
			if _, err := t.shakeDialer(c, t.hello(purposePeer, ""), j); err != nil {
				send(result{j, c, err})
				return
			}
			var v verdict
			if err := readMsg(c, &v); err != nil {
				send(result{j, c, fmt.Errorf("rank %d dropped the handshake: %w", j, err)})
				return
			}
			if v.Err != "" {
				send(result{j, c, fmt.Errorf("%w: rank %d refused this rank: %s", ErrHandshake, j, v.Err)})
				return
			}
			send(result{j, c, nil})
		}()
	}
	if t.rank > 1 {
		var mu sync.Mutex
		seen := make([]bool, t.rank)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				r.track(c)
				go func() {
					h, err, junk := t.shakeListener(c, purposePeer, true, func(h hello) string {
						if h.Rank < 1 || h.Rank >= t.rank {
							return fmt.Sprintf("rank %d dialed rank %d, but only ranks 1..%d dial it", h.Rank, t.rank, t.rank-1)
						}
						mu.Lock()
						defer mu.Unlock()
						if seen[h.Rank] {
							return fmt.Sprintf("two processes claim rank %d (second from %s)", h.Rank, c.RemoteAddr())
						}
						seen[h.Rank] = true
						return ""
					})
					if junk {
						t.log.Warn("ignoring a connection that is not a ppgen rank", "rank", t.rank, "from", c.RemoteAddr(), "err", err)
						c.Close()
						return
					}
					send(result{h.Rank, c, err})
				}()
			}
		}()
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
					res.c.Close()
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
			return report(fmt.Errorf("%w: ranks %v did not connect within %v", ErrTimeout, missing(conns, t.rank), t.cfg.RendezvousTimeout))
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
