//go:build linux && (amd64 || arm64)

package nccl

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/internal/wire"
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

	// wc is the world's communicator (point-to-point); device.go.
	wc     *dcomm
	device int

	// The groups' communicators (collectives; coll.go): groupsMu guards
	// the list, newGroupMu serializes NewGroup.
	groupsMu   sync.Mutex
	groups     []*group
	newGroupMu sync.Mutex

	// mu serializes the point-to-point operations: the world's device
	// buffer, the NCCL issue order and the receive state below.
	mu       sync.Mutex
	boxes    [][wire.ChannelSlots][]message // messages received ahead, per (peer, channel)
	buffered int64                          // their payload bytes
	last     [][wire.ChannelSlots]*transport.Tag
	selfq    []header                 // headers of sends to this rank not yet received
	selfWant [wire.ChannelSlots][]int // ops of the batch waiting for a message from self, per channel

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
		wc: newDcomm(""), failed: make(chan struct{}), stop: make(chan struct{}),
		device: -1,
	}
	t.boxes = make([][wire.ChannelSlots][]message, t.world)
	t.last = make([][wire.ChannelSlots]*transport.Tag, t.world)
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
	if t.cfg.Device == AutoDevice && t.cfg.LocalRank >= int(n) {
		// NCCL refuses two ranks of a communicator on one GPU, as
		// "invalid usage" at ncclCommInitRank: say why before it does.
		return fmt.Errorf("%w: local rank %d would share device %d with local rank %d: this host has %d GPUs and NCCL refuses two ranks of a communicator on one GPU; start at most %d ranks on this host (one GPU each)",
			ErrNoDevice, t.cfg.LocalRank, dev, t.cfg.LocalRank%int(n), n, n)
	}
	if err := t.onDevice(func() error { return l.cudaErr("cudaStreamCreate", l.cudaStreamCreate(&t.wc.stream)) }); err != nil {
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
		t.wc.sem <- struct{}{}
		t.wc.handle = r.comm
		gone := t.isFailed()
		<-t.wc.sem
		if gone {
			t.abortComms()
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

// Close ends the transport: it waits for the operations in progress,
// destroys the communicators (the world's and the groups'), frees their
// device buffers and streams and says goodbye over
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
	err := t.destroy(t.wc, !failed)
	t.mu.Unlock()
	t.groupsMu.Lock()
	groups := t.groups
	t.groupsMu.Unlock()
	for _, g := range groups {
		g.mu.Lock() // the collective in progress
		if gerr := t.destroy(g.c, !failed); gerr != nil && err == nil {
			err = fmt.Errorf("%s: %w", g.c.what, gerr)
		}
		g.mu.Unlock()
	}
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
// aborts the communicators. Idempotent.
func (t *Transport) Abort(cause error) {
	if t.closed.Load() || t.closing.Swap(true) {
		return
	}
	if cause == nil {
		cause = transport.ErrAborted
	}
	if t.record(fmt.Errorf("%w: %w", transport.ErrAborted, cause), cause) {
		t.abortComms()
	}
	t.stopAll()
}
