package transport

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"gorgonia.org/tensor"
)

// InProcOption configures [NewInProc].
type InProcOption func(*inprocOptions)

type inprocOptions struct {
	timeout time.Duration
}

// InProcTimeout bounds every Recv wait (default [DefaultTimeout]).
func InProcTimeout(d time.Duration) InProcOption {
	return func(o *inprocOptions) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// inprocPoolBytes bounds the free receive buffers an in-process rank keeps.
const inprocPoolBytes = 256 << 20

// NewInProc returns the endpoints of an in-process world of the given size:
// element r is rank r's Transport. Queues are unbounded per (source,
// destination, channel), so Send never blocks; Send copies the tensor (into
// memory the receiver recycled, when it did).
func NewInProc(world int, opts ...InProcOption) []Transport {
	o := inprocOptions{timeout: DefaultTimeout}
	for _, f := range opts {
		f(&o)
	}
	eps := make([]*inproc, world)
	for r := range eps {
		ep := &inproc{rank: r, world: world, timeout: o.timeout, failed: make(chan struct{}), box: make([][wire.ChannelSlots]*mailbox, world),
			pool: newRecvPool(inprocPoolBytes)}
		for p := range ep.box {
			if p == r {
				continue
			}
			for c := range ep.box[p] {
				ep.box[p][c] = newMailbox()
			}
		}
		eps[r] = ep
	}
	out := make([]Transport, world)
	for r, ep := range eps {
		ep.peers = eps
		out[r] = ep
	}
	return out
}

// inproc is one rank's endpoint of an in-process world.
type inproc struct {
	rank, world int
	timeout     time.Duration
	peers       []*inproc
	box         [][wire.ChannelSlots]*mailbox // box[src][ch]: messages from src
	pool        *recvPool                     // backings of received copies, fed by Recycle

	closed   atomic.Bool
	failOnce sync.Once
	failed   chan struct{}
	err      error // set before failed is closed
}

func (t *inproc) Rank() int  { return t.rank }
func (t *inproc) World() int { return t.world }

func (t *inproc) fail(err error) {
	t.failOnce.Do(func() {
		t.err = err
		close(t.failed)
	})
}

func (t *inproc) failErr() error { return t.err }

func (t *inproc) Send(peer int, ch abi.Channel, tag Tag, x *tensor.Dense) error {
	if err := CheckPeer(t.rank, t.world, peer, ch); err != nil {
		return fmt.Errorf("transport: rank %d: send %s: %w", t.rank, ch, err)
	}
	select {
	case <-t.failed:
		return SendError(t.rank, ch, peer, t.err)
	default:
	}
	if t.closed.Load() {
		return SendError(t.rank, ch, peer, ErrClosed)
	}
	p := t.peers[peer]
	if p.closed.Load() {
		return SendError(t.rank, ch, peer, PeerClosed(peer))
	}
	c, err := p.pool.clone(x)
	if err != nil {
		return SendError(t.rank, ch, peer, err)
	}
	p.box[t.rank][ch].push(message{tag: tag, t: c})
	return nil
}

func (t *inproc) Recv(peer int, ch abi.Channel) (Tag, *tensor.Dense, error) {
	if err := CheckPeer(t.rank, t.world, peer, ch); err != nil {
		return Tag{}, nil, fmt.Errorf("transport: rank %d: recv %s: %w", t.rank, ch, err)
	}
	b := t.box[peer][ch]
	m, err := b.pop(t.timeout, t.failed, t.failErr)
	if err == wire.ErrNoProgress {
		var last *Tag
		if tag, ok := b.lastTag(); ok {
			last = &tag
		}
		return Tag{}, nil, NewProgressError(t.rank, "recv", peer, ch, t.timeout, "InProcTimeout", last, "")
	}
	if err != nil {
		return Tag{}, nil, RecvError(t.rank, ch, peer, err)
	}
	return m.tag, m.t, nil
}

// Recycle hands back t, a tensor Recv returned, so that a later send to
// this rank copies into its memory (see [Recycler]).
func (t *inproc) Recycle(x *tensor.Dense) { t.pool.put(x) }

// Close says goodbye: peers can still receive what this rank sent, then get
// "rank N closed the connection". Local operations fail with ErrClosed.
func (t *inproc) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	gone := PeerClosed(t.rank)
	for p, ep := range t.peers {
		if p == t.rank {
			continue
		}
		for c := range ep.box[t.rank] {
			ep.box[t.rank][c].close(gone)
		}
	}
	t.fail(ErrClosed)
	return nil
}

// Abort fails this endpoint and every peer's pending and future operations.
// After Close it does nothing.
func (t *inproc) Abort(cause error) {
	if t.closed.Load() {
		return
	}
	if cause == nil {
		cause = ErrAborted
	}
	t.fail(fmt.Errorf("%w: %w", ErrAborted, cause))
	news := AbortNews(t.rank, cause)
	for p, ep := range t.peers {
		if p != t.rank {
			ep.fail(news)
		}
	}
}
