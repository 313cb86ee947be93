//go:build linux && (amd64 || arm64)

package nccl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/internal/nap"
	"github.com/ppgen/ppgen/runtime/transport"
)

// Transport is one rank's endpoint over NCCL. Build it with [Dial].
type Transport struct {
	cfg   Config
	lib   *lib
	ctl   *transport.TCP
	rank  int
	world int
	log   *slog.Logger

	// commSem (one slot) guards every call that uses comm, and commGone:
	// the comm is not used once aborted or destroyed.
	commSem  chan struct{}
	comm     uintptr
	commGone bool
	stream   uintptr
	device   int

	// mu serializes operations: the device arena, the NCCL issue order
	// and the receive state below.
	mu       sync.Mutex
	boxes    [][transport.NumChannels][]message // messages received ahead, per (peer, channel)
	buffered int64                              // their payload bytes
	last     [][transport.NumChannels]*transport.Tag
	selfq    []header                     // headers of sends to this rank not yet received
	selfWant [transport.NumChannels][]int // ops of the batch waiting for a message from self, per channel
	arena    uintptr                      // device buffer of arenaSize bytes
	arenaLen uintptr

	failOnce sync.Once
	failed   chan struct{}
	err      error // set before failed is closed
	closing  atomic.Bool
	closed   atomic.Bool
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	peerGone []atomic.Bool // the peer closed the control connection
}

type message struct {
	tag transport.Tag
	t   *tensor.Dense
	n   int64
}

var (
	_ transport.Transport     = (*Transport)(nil)
	_ transport.Batcher       = (*Transport)(nil)
	_ transport.Fingerprinter = (*Transport)(nil)
)

// Dial joins the world described by cfg: the control connection's
// rendezvous (transport.DialTCP), then the libraries and the device on every
// rank, then the communicator (rank 0's unique id sent to every rank over
// the control connection, ncclCommInitRank everywhere). A rank that fails
// here aborts the control connection, so the others fail naming it.
func Dial(ctx context.Context, cfg Config) (*Transport, error) {
	if err := cfg.fill(); err != nil {
		return nil, fmt.Errorf("transport: rank %d: NCCL: %w", cfg.TCP.Rank, err)
	}
	ctl, err := transport.DialTCP(ctx, cfg.TCP)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg: cfg, ctl: ctl, rank: ctl.Rank(), world: ctl.World(), log: cfg.Logger,
		commSem: make(chan struct{}, 1), failed: make(chan struct{}), stop: make(chan struct{}),
		device: -1,
	}
	t.boxes = make([][transport.NumChannels][]message, t.world)
	t.last = make([][transport.NumChannels]*transport.Tag, t.world)
	t.peerGone = make([]atomic.Bool, t.world)
	if err := t.setup(ctx); err != nil {
		err = fmt.Errorf("transport: rank %d: NCCL: %w", t.rank, err)
		t.failAndTell(err)
		t.stopAll()
		return nil, err
	}
	t.wg.Add(1)
	go t.watchdog()
	t.log.Debug("NCCL transport up", "rank", t.rank, "world", t.world, "device", t.device, "nccl", t.lib.ncclPath)
	return t, nil
}

// setup loads the libraries, opens the device and creates the communicator.
func (t *Transport) setup(ctx context.Context) error {
	cudart, nccl := t.cfg.CUDARTLib, t.cfg.NCCLLib
	if cudart == "" {
		cudart = os.Getenv(CUDARTLibVar)
	}
	if nccl == "" {
		nccl = os.Getenv(NCCLLibVar)
	}
	l, err := loadLib(cudart, nccl)
	if err != nil {
		return err
	}
	t.lib = l
	var n int32
	if err := l.cudaErr("cudaGetDeviceCount", l.cudaGetDeviceCount(&n)); err != nil {
		return fmt.Errorf("%w: %w: is the NVIDIA driver loaded (nvidia-smi lists the GPUs)? the NCCL transport needs one GPU per rank", ErrNoDevice, err)
	}
	if n <= 0 || n > defaultDeviceCountMax {
		return fmt.Errorf("%w: cudaGetDeviceCount found %d devices: the NCCL transport needs one GPU per rank (nvidia-smi lists them)", ErrNoDevice, n)
	}
	dev := t.cfg.Device
	if dev == AutoDevice {
		dev = t.cfg.LocalRank % int(n)
	}
	if dev >= int(n) {
		return fmt.Errorf("%w: device %d requested, this host has %d (0 to %d)", ErrNoDevice, dev, n, n-1)
	}
	t.device = dev
	if err := t.onDevice(func() error { return l.cudaErr("cudaStreamCreate", l.cudaStreamCreate(&t.stream)) }); err != nil {
		return fmt.Errorf("device %d: %w", dev, err)
	}
	// Watch the control connection from now on: a peer that fails during
	// the setup is named.
	for p := range t.world {
		if p != t.rank {
			t.wg.Add(1)
			go t.watchPeer(p)
		}
	}
	id, err := t.exchangeID()
	if err != nil {
		return err
	}
	return t.initComm(ctx, id)
}

// exchangeID is the unique id's rendezvous: every rank > 0 reports ready to
// rank 0, rank 0 then calls ncclGetUniqueId and sends the id to every rank.
// The id travels as 128 float32 values, one per byte (exact).
func (t *Transport) exchangeID() (uniqueID, error) {
	var id uniqueID
	ready := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float32{1}))
	if t.rank != 0 {
		if err := t.ctl.Send(0, setupCh, transport.Tag{Stage: -1, Micro: int32(t.rank)}, ready); err != nil {
			return id, fmt.Errorf("report ready to rank 0: %w", err)
		}
		tag, v, err := t.ctl.Recv(0, setupCh)
		if err != nil {
			return id, fmt.Errorf("receive the NCCL unique id from rank 0: %w", err)
		}
		b, ok := v.Data().([]float32)
		if !ok || len(b) != uniqueIDBytes || tag != (transport.Tag{Stage: -2, Micro: 0}) {
			return id, fmt.Errorf("%w: rank 0 sent a malformed unique id (%v of shape %v, tag %v)", transport.ErrProtocol, v.Dtype(), v.Shape(), tag)
		}
		for i, f := range b {
			if f < 0 || f > 255 || f != float32(uint8(f)) {
				return id, fmt.Errorf("%w: rank 0 sent a unique id byte %v", transport.ErrProtocol, f)
			}
			id.internal[i] = uint8(f)
		}
		return id, nil
	}
	for p := 1; p < t.world; p++ {
		tag, _, err := t.ctl.Recv(p, setupCh)
		if err != nil {
			return id, fmt.Errorf("wait for rank %d's ready report: %w", p, err)
		}
		if tag != (transport.Tag{Stage: -1, Micro: int32(p)}) {
			return id, fmt.Errorf("%w: rank %d sent %v as its ready report", transport.ErrProtocol, p, tag)
		}
	}
	if err := t.lib.ncclErr("ncclGetUniqueId", t.lib.ncclGetUniqueId(&id)); err != nil {
		return id, err
	}
	b := make([]float32, uniqueIDBytes)
	for i, c := range id.internal {
		b[i] = float32(c)
	}
	for p := 1; p < t.world; p++ {
		v := tensor.New(tensor.WithShape(uniqueIDBytes), tensor.WithBacking(b))
		if err := t.ctl.Send(p, setupCh, transport.Tag{Stage: -2, Micro: 0}, v); err != nil {
			return id, fmt.Errorf("send the NCCL unique id to rank %d: %w", p, err)
		}
	}
	return id, nil
}

// initComm calls ncclCommInitRank, which returns when every rank called
// it. It is bounded by the rendezvous timeout and ctx, and by a peer's
// failure on the control connection; then the call is left behind (it
// cannot be interrupted before it returns a communicator) and Dial fails.
func (t *Transport) initComm(ctx context.Context, id uniqueID) error {
	type result struct {
		comm uintptr
		err  error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- result{err: fmt.Errorf("ncclCommInitRank %w: %v", transport.ErrPanicked, v)}
			}
		}()
		var comm uintptr
		err := t.onDevice(func() error {
			return t.lib.ncclErr("ncclCommInitRank", t.lib.ncclCommInitRank(&comm, int32(t.world), id, int32(t.rank)))
		})
		done <- result{comm, err}
	}()
	timer := time.NewTimer(t.cfg.TCP.RendezvousTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			return fmt.Errorf("create the communicator of %d ranks on device %d: %w", t.world, t.device, r.err)
		}
		t.commSem <- struct{}{}
		t.comm = r.comm
		gone := t.isFailed()
		<-t.commSem
		if gone {
			t.abortComm()
			return t.err
		}
		return nil
	case <-t.failed:
		return t.err
	case <-ctx.Done():
		return fmt.Errorf("ncclCommInitRank: %w", ctx.Err())
	case <-timer.C:
		return fmt.Errorf("%w: ncclCommInitRank did not return within %v (RendezvousTimeout): a rank did not join the communicator", transport.ErrTimeout, t.cfg.TCP.RendezvousTimeout)
	}
}

// Rank returns this endpoint's rank.
func (t *Transport) Rank() int { return t.rank }

// World returns the number of ranks.
func (t *Transport) World() int { return t.world }

// Fingerprint returns the schedule fingerprint every rank agreed on.
func (t *Transport) Fingerprint() string { return t.ctl.Fingerprint() }

// Device returns the CUDA device ordinal this rank uses.
func (t *Transport) Device() int { return t.device }

func (t *Transport) isFailed() bool {
	select {
	case <-t.failed:
		return true
	default:
		return false
	}
}

// fail records the transport's first error and aborts the communicator, so
// that every pending operation ends.
func (t *Transport) fail(err error) {
	if t.record(err, nil) {
		t.abortComm()
	}
}

// failAndTell is fail for a failure of this rank that breaks the
// communicator: the peers are told over the control connection (they fail
// naming this rank) before the communicator is aborted.
func (t *Transport) failAndTell(err error) {
	if t.record(err, err) {
		t.abortComm()
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

// abortComm calls ncclCommAbort once. It waits at most a second for an
// operation issuing calls on the communicator (ncclGroupEnd may block, and
// ending a blocked call is what ncclCommAbort is for).
func (t *Transport) abortComm() {
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	held := false
	select {
	case t.commSem <- struct{}{}:
		held = true
	case <-timer.C:
	}
	if !t.commGone && t.comm != 0 {
		t.commGone = true
		if r := t.lib.ncclCommAbort(t.comm); r != ncclSuccess {
			t.log.Warn("ncclCommAbort failed", "rank", t.rank, "err", t.lib.ncclErr("ncclCommAbort", r))
		}
	}
	if held {
		<-t.commSem
	}
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

// watchdog polls the communicator's asynchronous error. An error fails the
// transport, aborts the communicator and the control connection: every peer
// learns that this rank failed and why. ncclRemoteError (a peer failed)
// first waits a moment for the control connection to name that peer.
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
		// Skip the tick while an operation is inside a group call (it may
		// block there): the next tick polls.
		select {
		case t.commSem <- struct{}{}:
		default:
			continue
		}
		res := int32(ncclSuccess)
		r := int32(ncclSuccess)
		if !t.commGone {
			r = t.lib.ncclCommGetAsyncError(t.comm, &res)
		}
		<-t.commSem
		if r != ncclSuccess {
			res = r
		}
		if res == ncclSuccess || res == ncclInProgress {
			continue
		}
		cerr := t.lib.ncclErr("ncclCommGetAsyncError", res)
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
			err := fmt.Errorf("NCCL reported a remote error (a peer failed or the network broke; no peer reported over the control connection): %w", cerr)
			t.failAndTell(err)
			return
		}
		err := fmt.Errorf("NCCL asynchronous error on device %d: %w", t.device, cerr)
		t.log.Error("NCCL communicator failed, aborting", "rank", t.rank, "err", err)
		t.failAndTell(err) // peers first: they learn who failed before the connections break
		return
	}
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

// opError is the error of an operation on this rank: "transport: rank R:
// send act to rank P: ...".
func (t *Transport) opError(send bool, ch transport.Channel, peer int, err error) error {
	if send {
		return fmt.Errorf("transport: rank %d: send %s to rank %d: %w", t.rank, ch, peer, err)
	}
	return fmt.Errorf("transport: rank %d: recv %s from rank %d: %w", t.rank, ch, peer, err)
}

func (t *Transport) checkOp(peer int, ch transport.Channel) error {
	if peer < 0 || peer >= t.world {
		return fmt.Errorf("peer rank %d out of range [0, %d)", peer, t.world)
	}
	if ch >= transport.NumChannels {
		return fmt.Errorf("unknown channel %d", uint8(ch))
	}
	return nil
}

// Send hands x, tagged tag, to peer on ch and waits until peer took it
// (NCCL's rendezvous). A send to this rank is delivered at once.
func (t *Transport) Send(peer int, ch transport.Channel, tag transport.Tag, x *tensor.Dense) error {
	ops := []transport.BatchOp{{Peer: peer, Ch: ch, Send: true, Tag: tag, T: x}}
	return t.batch(ops, true)
}

// Recv waits (bounded by the progress timeout) for the next message from
// peer on ch. The returned tensor is freshly allocated.
func (t *Transport) Recv(peer int, ch transport.Channel) (transport.Tag, *tensor.Dense, error) {
	ops := []transport.BatchOp{{Peer: peer, Ch: ch}}
	if err := t.batch(ops, true); err != nil {
		return transport.Tag{}, nil, err
	}
	return ops[0].Tag, ops[0].T, nil
}

// Batch runs ops as one NCCL group (see the package doc): every send's
// header goes out first, then one group issues every payload; a receive
// that must first take a message of another channel from its peer splits
// the batch there.
func (t *Transport) Batch(ops []transport.BatchOp) error { return t.batch(ops, false) }

// item is one NCCL send or receive of a group.
type item struct {
	send bool
	peer int
	h    header
	raw  []byte        // send: the payload; receive: the host buffer
	keep *tensor.Dense // the tensor raw belongs to
	op   int           // receive: the op it completes, or -1: to the box of (peer, h.ch)
	off  uintptr       // offset in the arena
}

func (t *Transport) batch(ops []transport.BatchOp, single bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	opErr := func(i int, err error) error {
		op := &ops[i]
		if single {
			return t.opError(op.Send, op.Ch, op.Peer, err)
		}
		return fmt.Errorf("transport: rank %d: batch op %d (%s): %w", t.rank, i, op, err)
	}
	for i := range ops {
		if err := t.checkOp(ops[i].Peer, ops[i].Ch); err != nil {
			return opErr(i, err)
		}
	}
	if t.isFailed() {
		return opErr(0, t.err)
	}
	for ch := range t.selfWant {
		t.selfWant[ch] = t.selfWant[ch][:0]
	}
	// Check everything before the first header leaves: sends' payloads,
	// and that every receive from this rank has a message.
	var items []item
	var self [transport.NumChannels]int
	for ch := range self {
		self[ch] = len(t.boxes[t.rank][ch])
	}
	for i := range ops {
		op := &ops[i]
		if !op.Send {
			continue
		}
		if op.Peer != t.rank && t.peerGone[op.Peer].Load() {
			return opErr(i, &transport.PeerError{Peer: op.Peer, Reason: "closed the connection", Err: transport.ErrPeerClosed})
		}
		p, err := payloadOf(op.T, t.cfg.MaxMessageBytes)
		if err != nil {
			return opErr(i, err)
		}
		h := header{ch: op.Ch, tag: op.Tag, dt: p.dt, dims: p.dims, bytes: int64(len(p.raw))}
		items = append(items, item{send: true, peer: op.Peer, h: h, raw: p.raw, keep: p.keep, op: i})
		if op.Peer == t.rank {
			self[op.Ch]++
		}
	}
	for i := range ops {
		if op := &ops[i]; !op.Send && op.Peer == t.rank {
			if self[op.Ch] == 0 {
				return opErr(i, fmt.Errorf("nothing was sent to this rank on %s: a receive from this rank itself needs its send first (in the same batch, or before)", op.Ch))
			}
			self[op.Ch]--
		}
	}
	// The headers, in op order (NCCL's issue order per peer).
	remote := false // a header went to a peer
	for _, it := range items {
		if it.peer == t.rank {
			t.selfq = append(t.selfq, it.h)
			continue
		}
		v := encodeHeader(it.h)
		if err := t.ctl.Send(it.peer, headerCh, it.h.tag, tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))); err != nil {
			if remote {
				// Headers of this batch went to other peers, whose
				// payloads will not follow: the order with them is
				// broken.
				t.failAndTell(err)
			}
			t.selfq = t.selfq[:0]
			return opErr(it.op, err)
		}
		remote = true
	}
	// The receives: from the box, or the next headers of the peer.
	for i := range ops {
		op := &ops[i]
		if op.Send {
			continue
		}
		if m, ok := t.popBox(op.Peer, op.Ch); ok {
			op.Tag, op.T = m.tag, m.t
			continue
		}
		if op.Peer == t.rank {
			t.selfWant[op.Ch] = append(t.selfWant[op.Ch], i) // served by drainSelf
			continue
		}
		for {
			h, err := t.nextHeader(op.Peer, op.Ch)
			if err != nil {
				if len(items) > 0 || len(t.selfq) > 0 {
					// Planned and not issued: sends whose headers went
					// out, or receives whose headers were taken. The
					// order with those peers is lost.
					t.fail(err)
				}
				return opErr(i, err)
			}
			if h.ch == op.Ch {
				items = append(items, t.recvItem(h, op.Peer, i, ops))
				break
			}
			// A message of another channel comes first: it must be
			// received before the peer sends the next header. Issue what
			// is planned so far, with it.
			items = append(items, t.recvItem(h, op.Peer, -1, ops))
			items = t.drainSelf(items, ops)
			if err := t.exec(items, ops); err != nil {
				return opErr(i, err)
			}
			items = items[:0]
		}
	}
	items = t.drainSelf(items, ops)
	if err := t.exec(items, ops); err != nil {
		first := 0
		if len(items) > 0 {
			first = items[0].op
		}
		if first < 0 {
			first = 0
		}
		return opErr(first, err)
	}
	for i := range ops {
		if op := &ops[i]; !op.Send {
			tag := op.Tag
			t.last[op.Peer][op.Ch] = &tag
		}
	}
	return nil
}

// recvItem allocates the host tensor of a receive of h from peer for op (or
// -1: for the box).
func (t *Transport) recvItem(h header, peer, op int, ops []transport.BatchOp) item {
	x, raw := newTensor(h)
	if op >= 0 {
		ops[op].Tag, ops[op].T = h.tag, x
	}
	return item{peer: peer, h: h, raw: raw, keep: x, op: op}
}

// drainSelf adds a receive for every header of a send to self still
// queued (NCCL needs a self send's receive in the same group), in the
// order of the sends: each completes the first receive from self waiting on
// its channel, else goes to the box.
func (t *Transport) drainSelf(items []item, ops []transport.BatchOp) []item {
	for _, h := range t.selfq {
		op := -1
		if w := t.selfWant[h.ch]; len(w) > 0 {
			op, t.selfWant[h.ch] = w[0], w[1:]
		}
		items = append(items, t.recvItem(h, t.rank, op, ops))
	}
	t.selfq = t.selfq[:0]
	return items
}

func (t *Transport) popBox(peer int, ch transport.Channel) (message, bool) {
	b := t.boxes[peer][ch]
	if len(b) == 0 {
		return message{}, false
	}
	m := b[0]
	b[0] = message{}
	t.boxes[peer][ch] = b[1:]
	t.buffered -= m.n
	return m, true
}

// nextHeader waits for peer's next header over the control connection.
func (t *Transport) nextHeader(peer int, ch transport.Channel) (header, error) {
	tag, v, err := t.ctl.Recv(peer, headerCh)
	if err != nil {
		var pe *transport.ProgressError
		if errors.As(err, &pe) {
			return header{}, progressError(t.rank, "recv", peer, ch, pe.Waited, t.last[peer][ch],
				"no message announced over the control connection")
		}
		if !t.ctlFailed(peer, err) || t.isFailed() {
			return header{}, t.err
		}
		t.peerGone[peer].Store(true)
		return header{}, &transport.PeerError{Peer: peer, Reason: "closed the connection", Err: transport.ErrPeerClosed}
	}
	f, ok := v.Data().([]float64)
	if !ok {
		err = fmt.Errorf("header of dtype %v, want float64", v.Dtype())
	}
	var h header
	if err == nil {
		h, err = decodeHeader(tag, f, t.cfg.MaxMessageBytes)
	}
	if err != nil {
		pe := &transport.PeerError{Peer: peer, Reason: "sent a bad message header: " + err.Error(), Err: transport.ErrProtocol}
		t.failAndTell(pe)
		return header{}, pe
	}
	return h, nil
}

// exec runs items as one NCCL group on the stream: the sends' payloads are
// copied to the device, every send and receive is issued between
// ncclGroupStart and ncclGroupEnd, the stream is waited for (bounded by the
// progress timeout), and the receives are copied back to their host
// tensors. Received messages not asked for go to their boxes.
func (t *Transport) exec(items []item, ops []transport.BatchOp) error {
	if len(items) == 0 {
		return nil
	}
	var total uintptr
	nccl := 0
	for i := range items {
		if items[i].h.bytes == 0 {
			continue // shape only: nothing crosses NCCL (both sides know)
		}
		items[i].off = total
		total += (uintptr(items[i].h.bytes) + deviceAlign - 1) &^ (deviceAlign - 1)
		nccl++
	}
	if nccl > 0 {
		if err := t.onDevice(func() error { return t.run(items, total) }); err != nil {
			if !t.isFailed() {
				t.failAndTell(err)
			}
			return errOf(err, t)
		}
	}
	for _, it := range items {
		if it.send || it.op >= 0 {
			continue
		}
		if it.peer != t.rank && t.buffered+it.h.bytes > t.cfg.MaxBufferedBytes {
			err := fmt.Errorf("rank %d sent %d bytes on other channels ahead of the awaited message, over MaxBufferedBytes %d (ranks run different schedules?)",
				it.peer, t.buffered+it.h.bytes, t.cfg.MaxBufferedBytes)
			t.failAndTell(err)
			return err
		}
		t.buffered += it.h.bytes
		t.boxes[it.peer][it.h.ch] = append(t.boxes[it.peer][it.h.ch], message{it.h.tag, it.keep, it.h.bytes})
	}
	return nil
}

// run is exec's device part, for items of total arena bytes.
func (t *Transport) run(items []item, total uintptr) error {
	l := t.lib
	if err := t.ensureArena(total); err != nil {
		return err
	}
	for _, it := range items {
		if it.send && it.h.bytes > 0 {
			r := l.memcpyH2D(t.arena+it.off, unsafe.Pointer(unsafe.SliceData(it.raw)), uintptr(it.h.bytes), cudaMemcpyHostToDev, t.stream)
			if err := l.cudaErr("cudaMemcpyAsync (host to device)", r); err != nil {
				return err
			}
		}
	}
	if err := t.issue(items); err != nil {
		return err
	}
	if err := t.wait(items); err != nil {
		return err
	}
	for _, it := range items {
		if !it.send && it.h.bytes > 0 {
			r := l.memcpyD2H(unsafe.Pointer(unsafe.SliceData(it.raw)), t.arena+it.off, uintptr(it.h.bytes), cudaMemcpyDevToHost, t.stream)
			if err := l.cudaErr("cudaMemcpyAsync (device to host)", r); err != nil {
				return err
			}
		}
	}
	if err := t.wait(items); err != nil {
		return err
	}
	for _, it := range items {
		runtime.KeepAlive(it.keep)
	}
	return nil
}

// issue calls ncclGroupStart, ncclSend or ncclRecv per item, ncclGroupEnd.
func (t *Transport) issue(items []item) error {
	l := t.lib
	t.commSem <- struct{}{}
	defer func() { <-t.commSem }()
	if t.commGone {
		return t.errOr(transport.ErrAborted)
	}
	if err := l.ncclErr("ncclGroupStart", l.ncclGroupStart()); err != nil {
		return err
	}
	var first error
	for _, it := range items {
		if it.h.bytes == 0 {
			continue
		}
		var r int32
		if it.send {
			r = l.ncclSend(t.arena+it.off, uintptr(it.h.bytes), ncclUint8, int32(it.peer), t.comm, t.stream)
		} else {
			r = l.ncclRecv(t.arena+it.off, uintptr(it.h.bytes), ncclUint8, int32(it.peer), t.comm, t.stream)
		}
		if r != ncclSuccess && first == nil {
			call := "ncclRecv"
			if it.send {
				call = "ncclSend"
			}
			first = l.ncclErr(fmt.Sprintf("%s of %d bytes, peer %d", call, it.h.bytes, it.peer), r)
		}
	}
	// The group must be closed even when a call failed. ncclGroupEnd may
	// block (NCCL connects a pair of ranks at their first group): past the
	// progress timeout the transport fails and the communicator is aborted,
	// which ends the call.
	pe := t.progressError(items, "ncclGroupEnd did not return")
	stuck := time.AfterFunc(t.cfg.TCP.Timeout, func() {
		defer t.catch("group timer")
		t.fail(pe)
	})
	if err := l.ncclErr("ncclGroupEnd", l.ncclGroupEnd()); err != nil && first == nil {
		first = err
	}
	stuck.Stop()
	return first
}

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

// wait polls the stream until its work is done, the transport fails, or the
// progress timeout passes (then the transport fails with a
// *transport.ProgressError naming the first receive of items, else the
// first send).
func (t *Transport) wait(items []item) error {
	deadline := time.Now().Add(t.cfg.TCP.Timeout)
	pause := 5 * time.Microsecond
	for {
		r := t.lib.cudaStreamQuery(t.stream)
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
			pe := t.progressError(items, "")
			t.fail(pe)
			return pe
		}
		nap.Sleep(pause) // time.Sleep rounds sub-millisecond sleeps up to ~1 ms
		if pause < time.Millisecond {
			pause *= 2
		}
	}
}

func (t *Transport) progressError(items []item, note string) *transport.ProgressError {
	pick := -1
	for i, it := range items {
		if it.h.bytes > 0 && (pick < 0 || (!it.send && items[pick].send)) {
			pick = i
		}
	}
	it := items[pick]
	op := "recv"
	if it.send {
		op = "send"
	}
	if note == "" {
		note = "the NCCL operation did not complete"
		if n := len(items); n > 1 {
			note = fmt.Sprintf("the NCCL group of %d operations did not complete", n)
		}
	}
	if t.peerGone[it.peer].Load() {
		note += fmt.Sprintf("; rank %d closed its control connection", it.peer)
	}
	return progressError(t.rank, op, it.peer, it.h.ch, t.cfg.TCP.Timeout, t.last[it.peer][it.h.ch], note)
}

// ensureArena makes the device buffer at least n bytes (grown to the next
// power of two from 1 MiB).
func (t *Transport) ensureArena(n uintptr) error {
	if n <= t.arenaLen {
		return nil
	}
	size := uintptr(1 << 20)
	for size < n {
		size *= 2
	}
	l := t.lib
	if t.arena != 0 {
		if err := l.cudaErr("cudaFree", l.cudaFree(t.arena)); err != nil {
			return err
		}
		t.arena, t.arenaLen = 0, 0
	}
	var p uintptr
	if err := l.cudaErr(fmt.Sprintf("cudaMalloc of %d bytes on device %d", size, t.device), l.cudaMalloc(&p, size)); err != nil {
		return err
	}
	t.arena, t.arenaLen = p, size
	return nil
}

// Close ends the transport: it waits for the operation in progress,
// destroys the communicator, frees the device buffer and says goodbye over
// the control connection (what was sent before stays receivable there, but
// NCCL sends are rendezvous: nothing is in flight). Idempotent.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.closing.Store(true)
	t.stopAll()
	t.mu.Lock()
	failed := t.isFailed()
	t.commSem <- struct{}{}
	var err error
	if !t.commGone && t.comm != 0 {
		t.commGone = true
		err = t.lib.ncclErr("ncclCommDestroy", t.lib.ncclCommDestroy(t.comm))
	}
	<-t.commSem
	if !failed && t.lib != nil {
		_ = t.onDevice(func() error {
			if t.arena != 0 {
				_ = t.lib.cudaFree(t.arena)
				t.arena, t.arenaLen = 0, 0
			}
			if t.stream != 0 {
				_ = t.lib.cudaStreamDestroy(t.stream)
				t.stream = 0
			}
			return nil
		})
	}
	t.mu.Unlock()
	t.fail(transport.ErrClosed)
	cerr := t.ctl.Close()
	t.wg.Wait()
	if err != nil {
		return fmt.Errorf("transport: rank %d: close: %w", t.rank, err)
	}
	return cerr
}

// Abort fails every pending and future operation here and, through the
// control connection, at every peer ("rank N aborted: cause"); then it
// aborts the communicator. Idempotent.
func (t *Transport) Abort(cause error) {
	if t.closed.Load() || t.closing.Swap(true) {
		return
	}
	if cause == nil {
		cause = transport.ErrAborted
	}
	if t.record(fmt.Errorf("%w: %w", transport.ErrAborted, cause), cause) {
		t.abortComm()
	}
	t.stopAll()
}

// progressError is a wait of rank that made no progress for waited, as the
// transport package's transports report it.
func progressError(rank int, op string, peer int, ch transport.Channel, waited time.Duration, last *transport.Tag, note string) *transport.ProgressError {
	e := &transport.ProgressError{Rank: rank, Op: op, Peer: peer, Ch: ch, Waited: waited, Setting: "PPGEN_TIMEOUT", Last: last, Note: note}
	reason := fmt.Sprintf("sent nothing on %s for %v (no progress, %s)", ch, waited, e.Setting)
	if op == "send" {
		reason = fmt.Sprintf("did not read %s for %v (no progress, %s)", ch, waited, e.Setting)
	}
	e.Err = &transport.PeerError{Peer: peer, Reason: reason, Err: transport.ErrTimeout}
	return e
}
