package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/launch"
	"gorgonia.org/tensor"
)

// TCP is a Transport over one TCP connection per peer pair. Build it with
// [DialTCP].
type TCP struct {
	cfg   TCPConfig
	rank  int
	world int
	log   *slog.Logger
	conns []*tcpConn // conns[peer]; nil at this rank
	pool  *recvPool  // receive buffers, fed by Recycle

	// sessions maps the connection phase's authenticated connections to
	// their frame keys (*frameKeys; nil with PlainFrames).
	sessions sync.Map

	closing     atomic.Bool   // Close, Abort or Kill began: connection errors are expected
	closingCh   chan struct{} // closed when closing is first set
	closingOnce sync.Once
	closed      atomic.Bool // Close or Kill was called
	failOnce    sync.Once
	failed      chan struct{}
	err         error // set before failed is closed

	hbStop     chan struct{}
	hbStopOnce sync.Once
	hbPaused   atomic.Bool // test hook: stop heartbeats (simulates a hung process)
	wg         sync.WaitGroup
}

// Frame kinds.
const (
	frameData      = 1
	frameHeartbeat = 2
	frameGoodbye   = 3
	frameAbort     = 4
	frameByeAck    = 5 // "got your goodbye; I will send you nothing more"
)

const (
	frameMagic     = 0x31677070 // "ppg1"
	frameHdrLen    = 24
	maxAbortMsgLen = 4096
)

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// tcpConn is the connection to one peer.
type tcpConn struct {
	t    *TCP
	peer int
	c    net.Conn

	wmu     sync.Mutex
	byeSent bool // under wmu
	hdr     [frameHdrLen + 8*wire.MaxDims]byte
	arr     [4][]byte // header, its seal, payload, its tags (writeFrame)
	bufs    net.Buffers
	seal    *frameSealer // under wmu; nil: plain frames
	open    *frameOpener // the reader's; nil: plain frames

	lastWrite atomic.Int64 // unix nanoseconds
	byeRecv   atomic.Bool
	box       [wire.ChannelSlots]*mailbox
	done      chan struct{} // closed when the reader exits

	// The receive queue bound (RecvQueueBytes): queued counts the bytes of
	// frames pushed to box and not yet popped; space is signalled on every
	// pop; paused is set while the reader waits for space.
	queued     atomic.Int64
	peakQueued atomic.Int64 // for tests
	space      chan struct{}
	paused     atomic.Bool

	// settled is closed once the peer will send nothing more: it
	// acknowledged our goodbye, said goodbye itself, or the reader ended.
	// Close waits for it so that closing never resets a connection with
	// unread bytes (which could destroy data still queued for the peer).
	settled     chan struct{}
	settledOnce sync.Once
}

func (c *tcpConn) settle() { c.settledOnce.Do(func() { close(c.settled) }) }

func newTCPConn(t *TCP, peer int, c net.Conn) *tcpConn {
	tc := &tcpConn{t: t, peer: peer, c: c, done: make(chan struct{}), settled: make(chan struct{}), space: make(chan struct{}, 1)}
	for i := range tc.box {
		tc.box[i] = newMailbox()
		tc.box[i].onPop = tc.popped
	}
	tc.lastWrite.Store(time.Now().UnixNano())
	return tc
}

// Rank returns this endpoint's rank.
func (t *TCP) Rank() int { return t.rank }

// World returns the number of ranks.
func (t *TCP) World() int { return t.world }

// Fingerprint returns the schedule fingerprint every peer agreed on.
func (t *TCP) Fingerprint() string { return t.cfg.Fingerprint }

func (t *TCP) fail(err error) {
	t.failOnce.Do(func() {
		t.err = err
		close(t.failed)
		if !t.closing.Load() {
			t.log.Debug("transport failed", "rank", t.rank, "err", err)
		}
	})
}

func (t *TCP) failErr() error { return t.err }

func (t *TCP) startClosing() {
	t.closing.Store(true)
	t.closingOnce.Do(func() { close(t.closingCh) })
}

// testHook, when set by a test, is called at the start of every transport
// goroutine with its name ("reader", "heartbeat", "accept", "handshake",
// ...), to inject panics.
var testHook atomic.Pointer[func(site string)]

func hook(site string) {
	if f := testHook.Load(); f != nil {
		(*f)(site)
	}
}

// catch, deferred at the top of every transport goroutine, turns a panic
// into the error "transport: rank R: <what> panicked: <value>" (wrapping
// ErrPanicked), logs it with the stack and hands it to report, which aborts
// the rank (so its peers hear of it at once) or fails the rendezvous. A
// panic never crashes the process.
func (t *TCP) catch(what string, report func(error)) {
	v := recover()
	if v == nil {
		return
	}
	err := fmt.Errorf("transport: rank %d: %s %w: %v", t.rank, what, ErrPanicked, v)
	t.log.Error("transport goroutine panicked", "rank", t.rank, "goroutine", what, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	report(err)
}

// popped is the mailboxes' onPop: size bytes left the receive queue.
func (c *tcpConn) popped(size int64) {
	c.queued.Add(-size)
	select {
	case c.space <- struct{}{}:
	default:
	}
}

// frameOverhead is what a queued frame costs in memory beyond its bytes
// (wire.FrameOverhead, shared with the MPI transport's queue).
const frameOverhead = wire.FrameOverhead

// admit waits until a frame of size bytes fits the receive queue
// (RecvQueueBytes; always when the queue is empty). It returns keep=false
// when the frame should be read and dropped (this rank is closing and
// receives nothing more) and ok=false when the transport failed.
func (c *tcpConn) admit(size int64) (keep, ok bool) {
	t := c.t
	for {
		q := c.queued.Load()
		if q == 0 || q+size <= t.cfg.RecvQueueBytes {
			if c.paused.Load() {
				c.paused.Store(false)
				t.log.Debug("receive queue drained, reading again", "rank", t.rank, "peer", c.peer)
			}
			return true, true
		}
		if t.closing.Load() {
			return false, true
		}
		if !c.paused.Swap(true) {
			t.log.Debug("receive queue full, not reading until Recv drains it", "rank", t.rank, "peer", c.peer, "queued", q, "bound", t.cfg.RecvQueueBytes)
		}
		select {
		case <-c.space:
		case <-t.failed:
			return false, false
		case <-t.closingCh:
		}
	}
}

func (t *TCP) isFailed() bool {
	select {
	case <-t.failed:
		return true
	default:
		return false
	}
}

// start launches the readers and the heartbeat once every connection exists.
func (t *TCP) start() {
	for _, c := range t.conns {
		if c == nil {
			continue
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer t.catch(fmt.Sprintf("reader for peer %d", c.peer), t.Abort)
			c.readLoop()
		}()
	}
	if t.world > 1 {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer t.catch("heartbeat", t.Abort)
			t.heartbeat()
		}()
	}
}

// Send writes one frame (header, dims, payload) to peer with a single
// vectored write (authenticated frames over one chunk: their payload tags in
// a second, see writeFrame). It returns once the frame is in the socket.
func (t *TCP) Send(peer int, ch abi.Channel, tag Tag, x *tensor.Dense) error {
	if err := CheckPeer(t.rank, t.world, peer, ch); err != nil {
		return fmt.Errorf("transport: rank %d: send %s: %w", t.rank, ch, err)
	}
	if t.isFailed() {
		return SendError(t.rank, ch, peer, t.err)
	}
	c := t.conns[peer]
	if c.byeRecv.Load() {
		return SendError(t.rank, ch, peer, PeerClosed(peer))
	}
	v, err := wire.PayloadOf(x)
	if err != nil {
		return SendError(t.rank, ch, peer, err)
	}
	hlen := frameHdrLen + 8*len(v.Dims)
	if size := int64(hlen) + int64(len(v.Raw)); size > t.cfg.MaxFrameBytes {
		return fmt.Errorf("transport: rank %d: send %s to rank %d: %w: tensor of shape %v is a %d-byte frame, over the cap of %d bytes (MaxFrameBytes)",
			t.rank, ch, peer, ErrFrameTooLarge, v.Dims, size, t.cfg.MaxFrameBytes)
	}
	payload := toWire(v.Raw, wire.ElemSize(v.Dtype))

	c.wmu.Lock()
	if c.byeSent {
		c.wmu.Unlock()
		return SendError(t.rank, ch, peer, ErrClosed)
	}
	h := c.hdr[:hlen]
	putHeader(h, frameData, wire.ChannelCode(ch), v.Dtype, tag, uint64(len(payload)))
	for i, d := range v.Dims {
		binary.LittleEndian.PutUint64(h[frameHdrLen+8*i:], uint64(d))
	}
	_ = c.c.SetWriteDeadline(time.Now().Add(t.cfg.Timeout))
	err = c.writeFrame(h, payload)
	c.lastWrite.Store(time.Now().UnixNano())
	c.wmu.Unlock()
	runtime.KeepAlive(v.Keep)
	if err != nil {
		// A partial frame may be on the wire: the connection is unusable.
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			pe := NewProgressError(t.rank, "send", peer, ch, t.cfg.Timeout, "PPGEN_TIMEOUT", nil,
				"its receive queue or the socket is full (a stuck rank, or more in flight than its RecvQueueBytes)")
			t.fail(pe)
			return pe
		}
		// A peer that aborted sent its abort frame before closing: it can
		// be in the socket behind the reset that failed this write. The
		// reader reads it and fails the transport with the peer's reason
		// (or exits on the reset); give it a moment, so that the error
		// names the cause rather than the broken pipe.
		select {
		case <-c.done:
		case <-t.failed:
		case <-time.After(abortNewsWait):
		}
		t.fail(c.ioError(err, "send"))
		return SendError(t.rank, ch, peer, t.err)
	}
	return nil
}

// abortNewsWait bounds how long a failed write waits for the peer's abort
// frame, which may be behind it in the socket (Send).
const abortNewsWait = 250 * time.Millisecond

// Recv waits for the next message from peer on ch.
func (t *TCP) Recv(peer int, ch abi.Channel) (Tag, *tensor.Dense, error) {
	if err := CheckPeer(t.rank, t.world, peer, ch); err != nil {
		return Tag{}, nil, fmt.Errorf("transport: rank %d: recv %s: %w", t.rank, ch, err)
	}
	c := t.conns[peer]
	b := c.box[ch]
	m, err := b.pop(t.cfg.Timeout, t.failed, t.failErr)
	if err == wire.ErrNoProgress {
		var last *Tag
		if tag, ok := b.lastTag(); ok {
			last = &tag
		}
		note := ""
		if c.paused.Load() {
			note = fmt.Sprintf("this rank's receive queue from rank %d is full (%d bytes not yet received on other channels, RecvQueueBytes %d), so it is not reading that connection",
				peer, c.queued.Load(), t.cfg.RecvQueueBytes)
		}
		return Tag{}, nil, NewProgressError(t.rank, "recv", peer, ch, t.cfg.Timeout, "PPGEN_TIMEOUT", last, note)
	}
	if err != nil {
		return Tag{}, nil, RecvError(t.rank, ch, peer, err)
	}
	return m.tag, m.t, nil
}

// Recycle hands back t, a tensor Recv returned, for later receives to
// reuse its memory (see [Recycler]). Tensors this transport did not lend,
// or lent and already recycled, are ignored.
func (t *TCP) Recycle(x *tensor.Dense) { t.pool.put(x) }

// ioError turns a socket error on the connection to c.peer into a PeerError.
func (c *tcpConn) ioError(err error, op string) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		if op == "send" {
			return &PeerError{Peer: c.peer, Reason: fmt.Sprintf("did not read for %v (send timed out)", c.t.cfg.Timeout), Err: ErrTimeout}
		}
		return &PeerError{Peer: c.peer, Reason: fmt.Sprintf("sent nothing for %v, not even a heartbeat (process dead or hung)", c.t.cfg.HeartbeatTimeout), Err: ErrTimeout}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return &PeerError{Peer: c.peer, Reason: fmt.Sprintf("closed the connection (%v)", err), Err: ErrPeerClosed}
	default:
		return &PeerError{Peer: c.peer, Reason: fmt.Sprintf("connection failed (%v)", err), Err: ErrPeerClosed}
	}
}

// deadlineReader refreshes the read deadline so that a silent connection
// fails after the heartbeat timeout.
type deadlineReader struct {
	c        net.Conn
	timeout  time.Duration
	deadline time.Time
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	now := time.Now()
	if r.deadline.Sub(now) < r.timeout-r.timeout/4 {
		r.deadline = now.Add(r.timeout)
		_ = r.c.SetReadDeadline(r.deadline)
	}
	return r.c.Read(p)
}

func (c *tcpConn) readLoop() {
	defer close(c.done)
	defer c.settle()
	hook("reader")
	t := c.t
	br := bufio.NewReaderSize(&deadlineReader{c: c.c, timeout: t.cfg.HeartbeatTimeout}, 64<<10)
	lim := frameLimits{maxFrame: t.cfg.MaxFrameBytes}
	var buf [frameHdrLen + 8*wire.MaxDims]byte
	for {
		if _, err := io.ReadFull(br, buf[:frameHdrLen]); err != nil {
			c.readFailed(err)
			return
		}
		nd := dimsOf(buf[:])
		if _, err := io.ReadFull(br, buf[frameHdrLen:headerBytes(nd)]); err != nil {
			c.readFailed(err)
			return
		}
		if c.open != nil {
			if err := c.open.openHead(br, buf[:headerBytes(nd)]); err != nil {
				c.readRefused(err)
				return
			}
		}
		h, err := decodeHeader(buf[:headerBytes(nd)], lim)
		if err != nil {
			c.readRefused(err)
			return
		}
		if h.kind != frameData && h.kind != frameAbort {
			if err := c.readPayload(br, nil); err != nil {
				return
			}
		}
		switch h.kind {
		case frameHeartbeat:
			continue
		case frameGoodbye:
			c.byeRecv.Store(true)
			gone := PeerClosed(c.peer)
			for _, b := range c.box {
				b.close(gone)
			}
			c.settle()
			// Acknowledge, unless our own goodbye already went out; from
			// now on nothing but our goodbye goes to this peer.
			c.wmu.Lock()
			if !c.byeSent {
				var h [frameHdrLen]byte
				putHeader(h[:], frameByeAck, 0, 0, Tag{}, 0)
				_ = c.c.SetWriteDeadline(time.Now().Add(time.Second))
				_ = c.writeFrame(h[:], nil)
			}
			c.wmu.Unlock()
			t.log.Debug("peer said goodbye", "rank", t.rank, "peer", c.peer)
			continue
		case frameByeAck:
			c.settle()
			continue
		case frameAbort:
			// Tag.Stage: the rank at fault; Tag.Micro: the rank that observed
			// it (-1 if the sender itself failed); channel: sentinel code.
			news := &PeerError{Peer: c.peer, Reason: "aborted (no reason given)", Err: ErrAborted}
			msg := make([]byte, h.n) // h.n <= maxAbortMsgLen
			var err error
			if c.open == nil {
				_, err = io.ReadFull(br, msg)
			} else {
				err = c.open.readPayload(br, msg)
			}
			if errors.Is(err, ErrProtocol) {
				c.readRefused(err) // a forged abort is no news
				return
			}
			if err == nil && len(msg) > 0 {
				news.Reason = string(msg)
			}
			origin, via := int(h.tag.Stage), int(h.tag.Micro)
			if origin >= 0 && origin < t.world && origin != c.peer && via >= 0 && via < t.world {
				news.Peer, news.Relayed, news.Via, news.Err = origin, true, via, wire.SentinelOf(h.code)
			}
			t.fail(news)
			return
		}
		// A data frame: wait for room in the receive queue, then take
		// exactly what the validated header describes from the pool (a
		// recycled array, or a new one).
		charge := h.size + frameOverhead // what the queued frame costs in memory
		keep, ok := c.admit(charge)
		if !ok {
			return
		}
		if !keep {
			if err := c.open.skipPayload(br, int64(h.n)); err != nil {
				c.readFailed(err)
				return
			}
			continue
		}
		x, raw := t.pool.get(h.dt, h.dims)
		if err := c.readPayload(br, raw); err != nil {
			return
		}
		fromWire(raw, wire.ElemSize(h.dt))
		if q := c.queued.Add(charge); q > c.peakQueued.Load() {
			c.peakQueued.Store(q) // only the reader raises it
		}
		c.box[h.ch].push(message{h.tag, x, charge})
	}
}

// readRefused fails the transport with err, a frame the peer sent that
// this rank refuses (decodeHeader's or frame authentication's error).
func (c *tcpConn) readRefused(err error) {
	cause := ErrProtocol
	if errors.Is(err, ErrFrameTooLarge) {
		cause = ErrFrameTooLarge
	}
	if !errors.Is(err, cause) { // a socket error reading the seal
		c.readFailed(err)
		return
	}
	reason := strings.TrimPrefix(strings.TrimPrefix(err.Error(), ErrProtocol.Error()+": "), ErrFrameTooLarge.Error()+": ")
	c.t.fail(&PeerError{Peer: c.peer, Reason: reason, Err: cause})
}

// readPayload reads the payload p of the frame being read (and, with
// authenticated frames, checks its tags), failing the transport on an error;
// the reader stops on an error.
func (c *tcpConn) readPayload(r io.Reader, p []byte) error {
	var err error
	if c.open == nil {
		_, err = io.ReadFull(r, p)
	} else {
		err = c.open.readPayload(r, p)
	}
	if err != nil {
		c.readRefused(err)
	}
	return err
}

func (c *tcpConn) readFailed(err error) {
	if c.byeRecv.Load() || c.t.closing.Load() || errors.Is(err, net.ErrClosed) {
		return // expected: the peer said goodbye, or this rank is closing
	}
	c.t.fail(c.ioError(err, "recv"))
}

func (t *TCP) heartbeat() {
	hook("heartbeat")
	iv := t.cfg.HeartbeatInterval
	tick := time.NewTicker(iv / 2)
	defer tick.Stop()
	var hb [frameHdrLen]byte
	putHeader(hb[:], frameHeartbeat, 0, 0, Tag{}, 0)
	for {
		select {
		case <-t.hbStop:
			return
		case <-tick.C:
		}
		if t.hbPaused.Load() {
			continue
		}
		now := time.Now()
		for _, c := range t.conns {
			if c == nil || c.byeRecv.Load() || now.UnixNano()-c.lastWrite.Load() < int64(iv) {
				continue
			}
			if !c.wmu.TryLock() {
				continue // a send is writing: that is traffic too
			}
			if !c.byeSent {
				_ = c.c.SetWriteDeadline(now.Add(t.cfg.HeartbeatTimeout))
				_ = c.writeFrame(hb[:], nil) // failures surface in the reader
				c.lastWrite.Store(now.UnixNano())
			}
			c.wmu.Unlock()
		}
	}
}

func (t *TCP) stopHeartbeat() { t.hbStopOnce.Do(func() { close(t.hbStop) }) }

// lingerTimeout bounds how long Close waits for peers' goodbyes.
const lingerTimeout = 3 * time.Second

// Close says goodbye to every peer (messages already sent stay receivable),
// waits for their acknowledgements (one round trip; at most a few seconds
// for a dead peer) and closes the connections.
func (t *TCP) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.startClosing()
	for _, c := range t.conns {
		if c == nil {
			continue
		}
		c.wmu.Lock()
		if !c.byeSent {
			c.byeSent = true
			if !t.isFailed() && !c.byeRecv.Load() {
				var h [frameHdrLen]byte
				putHeader(h[:], frameGoodbye, 0, 0, Tag{}, 0)
				_ = c.c.SetWriteDeadline(time.Now().Add(time.Second))
				_ = c.writeFrame(h[:], nil)
				if tc, ok := c.c.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
		}
		c.wmu.Unlock()
	}
	t.stopHeartbeat()
	// Wait until every peer acknowledged (or said goodbye itself), one
	// round trip, so closing does not reset connections that still carry
	// data for them. A dead or hung peer costs at most lingerTimeout.
	linger := time.NewTimer(lingerTimeout)
	defer linger.Stop()
wait:
	for _, c := range t.conns {
		if c == nil {
			continue
		}
		select {
		case <-c.settled:
		case <-linger.C:
			break wait
		case <-t.failed:
			break wait
		}
	}
	for _, c := range t.conns {
		if c != nil {
			_ = c.c.Close()
		}
	}
	t.fail(ErrClosed)
	t.wg.Wait()
	t.log.Debug("transport closed", "rank", t.rank)
	return nil
}

// Abort sends an abort frame carrying cause to every peer (best effort,
// bounded to about a second) and closes every connection. Peers' pending and
// future operations fail with "rank N aborted: cause".
func (t *TCP) Abort(cause error) {
	if t.closed.Load() || t.closing.Swap(true) {
		return
	}
	t.startClosing()
	if cause == nil {
		cause = ErrAborted
	}
	t.fail(fmt.Errorf("%w: %w", ErrAborted, cause))
	news := AbortNews(t.rank, cause)
	msg := news.Reason
	if len(msg) > maxAbortMsgLen {
		msg = msg[:maxAbortMsgLen]
	}
	tag := Tag{Stage: int32(news.Peer), Micro: -1}
	if news.Relayed {
		tag.Micro = int32(news.Via)
	}
	var wg sync.WaitGroup
	for _, c := range t.conns {
		if c == nil {
			continue
		}
		wg.Go(func() {
			defer t.catch(fmt.Sprintf("abort notice to peer %d", c.peer), func(error) { _ = c.c.Close() })
			deadline := time.Now().Add(200 * time.Millisecond)
			for !c.wmu.TryLock() {
				if time.Now().After(deadline) {
					_ = c.c.Close()
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			if !c.byeSent {
				c.byeSent = true
				var h [frameHdrLen]byte
				putHeader(h[:], frameAbort, wire.SentinelCode(news.Err), 0, tag, uint64(len(msg)))
				_ = c.c.SetWriteDeadline(time.Now().Add(time.Second))
				_ = c.writeFrame(h[:], []byte(msg))
			}
			c.wmu.Unlock()
			_ = c.c.Close()
		})
	}
	wg.Wait()
	t.stopHeartbeat()
	t.log.Debug("transport aborted", "rank", t.rank, "cause", cause)
}

// Kill closes every connection at once, without goodbye or abort frame, as
// if the process had been killed. It exists for fault-injection tests.
func (t *TCP) Kill() {
	t.closed.Store(true)
	t.startClosing()
	t.stopHeartbeat()
	for _, c := range t.conns {
		if c != nil {
			_ = c.c.Close()
		}
	}
	t.fail(fmt.Errorf("%w: killed", ErrClosed))
}

// toWire returns raw (native order) in the wire's little-endian order.
func toWire(raw []byte, es int) []byte {
	if littleEndian {
		return raw
	}
	out := make([]byte, len(raw))
	for i := 0; i+es <= len(raw); i += es {
		for k := range es {
			out[i+k] = raw[i+es-1-k]
		}
	}
	return out
}

// fromWire converts raw from wire order to native order in place.
func fromWire(raw []byte, es int) {
	if littleEndian {
		return
	}
	for i := 0; i+es <= len(raw); i += es {
		for k := range es / 2 {
			raw[i+k], raw[i+es-1-k] = raw[i+es-1-k], raw[i+k]
		}
	}
}

// DialTCP joins the world described by cfg: rank 0 listens at MasterAddr and
// hands out the other ranks' listen addresses; then every pair of ranks
// connects (the lower rank dials the higher; rank 0 keeps its rendezvous
// connections) and authenticates. DialTCP returns when every connection of
// this rank is up and every rank reported success to rank 0, or with an error
// naming what differs (world size, rank, schedule fingerprint, token) or who
// is missing. The whole phase is bounded by cfg.RendezvousTimeout and ctx.
func DialTCP(ctx context.Context, cfg TCPConfig) (*TCP, error) {
	if err := cfg.fill(); err != nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil, fmt.Errorf("transport: rank %d: %w", cfg.Rank, err)
	}
	t := &TCP{
		cfg: cfg, rank: cfg.Rank, world: cfg.World, log: cfg.Logger,
		conns:  make([]*tcpConn, cfg.World),
		pool:   newRecvPool(cfg.RecvQueueBytes),
		failed: make(chan struct{}), hbStop: make(chan struct{}), closingCh: make(chan struct{}),
	}
	if cfg.World > 1 && cfg.Token == "" {
		t.log.Warn("transport: no shared token (AllowNoToken, PPGEN_ALLOW_NO_TOKEN=1): connections are not authenticated, any process that reaches the ports can join the job",
			"rank", cfg.Rank, "world", cfg.World)
	}
	if cfg.World > 1 && cfg.PlainFrames {
		t.log.Warn("transport: frames are not authenticated (PlainFrames, "+launch.PlainFramesVar+"=1): whoever can write to the connections can inject or replay frames; use it only on a trusted network",
			"rank", cfg.Rank, "world", cfg.World)
	}
	if cfg.World == 1 {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return t, nil
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.RendezvousTimeout)
	defer cancel()
	var conns []net.Conn
	var err error
	if cfg.Rank == 0 {
		conns, err = t.rendezvousMaster(ctx)
	} else {
		conns, err = t.rendezvousWorker(ctx)
	}
	if err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		where := cfg.MasterAddr
		if where == "" && cfg.Listener != nil {
			where = cfg.Listener.Addr().String()
		}
		return nil, fmt.Errorf("transport: rank %d: rendezvous at %s: %w", cfg.Rank, where, err)
	}
	for p, c := range conns {
		if c != nil {
			_ = c.SetDeadline(time.Time{})
			keys, _ := t.sessions.Load(c)
			k, _ := keys.(*frameKeys)
			t.conns[p] = newTCPConnKeys(t, p, c, k)
		}
	}
	t.sessions.Clear()
	t.start()
	t.log.Debug("transport up", "rank", t.rank, "world", t.world)
	return t, nil
}
