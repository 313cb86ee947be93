//go:build linux && (amd64 || arm64)

package nccl

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
)

// NCCL's own collectives ([transport.Collectives]): a group is an NCCL
// communicator of its world ranks, with its own stream and device buffer,
// and each collective is NCCL's (ncclAllReduce in place, ncclAllGather in
// place, ncclReduceScatter, ncclBroadcast in place; AllToAll is a group of
// ncclSend and ncclRecv) on device copies of the host tensors, polled to
// completion under the progress timeout as the point-to-point transfers
// are.
//
// The communicator is a fresh one, not ncclCommSplit of the world's:
// ncclCommSplit is collective over every rank of the parent communicator
// (non-members pass NCCL_SPLIT_NOCOLOR), while NewGroup is collective over
// the members only (runtime/collective builds a group on its first
// collective, which the other ranks never run), and it exists only from
// NCCL 2.18 on. So member 0 of the group calls ncclGetUniqueId and sends
// the id, with the member list, to the other members over the control
// connection, and every member calls ncclCommInitRank: any NCCL 2 does it.

var _ transport.Collectives = (*Transport)(nil)

// groupIDStage tags the group id messages on the control connection's
// setup channel (Dial's ready reports and id use -1 and -2).
const groupIDStage = -3

// group is one group communicator.
type group struct {
	t     *Transport
	ranks []int // world ranks, member order
	rank  int   // this member
	mu    sync.Mutex
	c     *dcomm
}

// NewGroup creates the NCCL communicator of the world ranks ranks (see
// [transport.Collectives]): member 0 sends a fresh unique id to the others
// over the control connection, then every member calls ncclCommInitRank,
// bounded by the progress timeout. A failure fails the transport.
func (t *Transport) NewGroup(ranks []int) (transport.Group, error) {
	self, err := transport.GroupMember("NCCL", t.rank, t.world, ranks)
	if err != nil {
		return nil, err
	}
	if t.closed.Load() {
		return nil, fmt.Errorf("transport: rank %d: NCCL group %v: %w", t.rank, ranks, transport.ErrClosed)
	}
	if t.isFailed() {
		return nil, fmt.Errorf("transport: rank %d: NCCL group %v: %w", t.rank, ranks, t.err)
	}
	t.newGroupMu.Lock()
	defer t.newGroupMu.Unlock()
	g := &group{t: t, ranks: slices.Clone(ranks), rank: self, c: newDcomm(fmt.Sprintf("group of world ranks %v", ranks))}
	if err := t.buildGroup(g); err != nil {
		err = fmt.Errorf("transport: rank %d: NCCL group %v: %w", t.rank, ranks, err)
		var pe *transport.ProgressError
		if errors.Is(err, transport.ErrTimeout) || errors.As(err, &pe) {
			t.fail(err) // a member did not come: no news to tell
		} else {
			t.failAndTell(err)
		}
		if t.err != err {
			return nil, fmt.Errorf("transport: rank %d: NCCL group %v: %w", t.rank, ranks, t.err)
		}
		return nil, err
	}
	return g, nil
}

// buildGroup exchanges g's unique id and creates its stream and
// communicator, then lists it with the transport's (so that failures abort
// it and Close destroys it).
func (t *Transport) buildGroup(g *group) error {
	id, err := t.groupID(g)
	if err != nil {
		return err
	}
	if err := t.onDevice(func() error { return t.lib.cudaErr("cudaStreamCreate", t.lib.cudaStreamCreate(&g.c.stream)) }); err != nil {
		return err
	}
	h, err := t.initGroupComm(g, id)
	if err != nil {
		_ = t.onDevice(func() error { return t.lib.cudaErr("cudaStreamDestroy", t.lib.cudaStreamDestroy(g.c.stream)) })
		g.c.stream = 0
		return err
	}
	g.c.handle = h
	t.groupsMu.Lock()
	t.groups = append(t.groups, g)
	t.groupsMu.Unlock()
	if t.isFailed() { // failed while it was created: abortComms may have missed it
		t.abortComm(g.c)
		return t.err
	}
	return nil
}

// groupID is the group's unique id: member 0 calls ncclGetUniqueId and
// sends it, with the member list, to every other member over the control
// connection (encodeGroupID); the others receive it and check that the
// list is theirs.
func (t *Transport) groupID(g *group) (uniqueID, error) {
	var id uniqueID
	tag := transport.Tag{Stage: groupIDStage}
	if g.rank == 0 {
		if err := t.lib.ncclErr("ncclGetUniqueId", t.lib.ncclGetUniqueId(&id)); err != nil {
			return id, err
		}
		for _, p := range g.ranks[1:] {
			v := encodeGroupID(id, g.ranks)
			if err := t.ctl.Send(p, setupCh, tag, tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))); err != nil {
				return id, fmt.Errorf("send the group's NCCL unique id to world rank %d: %w", p, err)
			}
		}
		return id, nil
	}
	leader := g.ranks[0]
	got, x, err := t.ctl.Recv(leader, setupCh)
	if err != nil {
		var pe *transport.ProgressError
		if errors.As(err, &pe) {
			return id, fmt.Errorf("%w: world rank %d (the group's member 0) sent no NCCL unique id for %v (PPGEN_TIMEOUT): do all members build the group, and build their groups in the same order?",
				transport.ErrTimeout, leader, pe.Waited)
		}
		return id, fmt.Errorf("receive the group's NCCL unique id from world rank %d: %w", leader, err)
	}
	v, ok := x.Data().([]float64)
	if !ok || got != tag {
		return id, fmt.Errorf("%w: world rank %d sent %v of shape %v, tag %v, as a group's unique id; want float64 values tagged %v",
			transport.ErrProtocol, leader, x.Dtype(), x.Shape(), got, tag)
	}
	id, theirs, err := decodeGroupID(v, t.world)
	if err != nil {
		return id, fmt.Errorf("%w: world rank %d sent a bad group id: %w", transport.ErrProtocol, leader, err)
	}
	if !slices.Equal(theirs, g.ranks) {
		return id, fmt.Errorf("%w: world rank %d builds the group %v where this rank builds %v: members must build the same groups in the same order",
			transport.ErrProtocol, leader, theirs, g.ranks)
	}
	return id, nil
}

// encodeGroupID lays out a group's id message: the 128 bytes of the id,
// then the members' world ranks, as float64 values (exact).
func encodeGroupID(id uniqueID, ranks []int) []float64 {
	v := make([]float64, uniqueIDBytes+len(ranks))
	for i, c := range id.internal {
		v[i] = float64(c)
	}
	for i, r := range ranks {
		v[uniqueIDBytes+i] = float64(r)
	}
	return v
}

// decodeGroupID validates and decodes a group's id message from a peer of
// a world of world ranks: every byte an integer in [0, 255], one to world
// members, each a world rank. It never panics and allocates at most world
// ranks.
func decodeGroupID(v []float64, world int) (uniqueID, []int, error) {
	var id uniqueID
	if len(v) <= uniqueIDBytes || len(v)-uniqueIDBytes > world {
		return id, nil, fmt.Errorf("%d values; want the %d bytes of the id and 1 to %d members", len(v), uniqueIDBytes, world)
	}
	for i, f := range v[:uniqueIDBytes] {
		if f < 0 || f > 255 || f != math.Trunc(f) {
			return id, nil, fmt.Errorf("id byte %d is %v; want an integer in [0, 255]", i, f)
		}
		id.internal[i] = uint8(f)
	}
	ranks := make([]int, len(v)-uniqueIDBytes)
	for i, f := range v[uniqueIDBytes:] {
		if f < 0 || f >= float64(world) || f != math.Trunc(f) {
			return id, nil, fmt.Errorf("member %d is %v, outside the world's ranks [0, %d)", i, f, world)
		}
		ranks[i] = int(f)
	}
	return id, ranks, nil
}

// initGroupComm calls ncclCommInitRank for g, which returns when every
// member called it, bounded by the progress timeout and the transport's
// failure; then the call is left behind (it cannot be interrupted before
// it returns a communicator, which is then aborted).
func (t *Transport) initGroupComm(g *group, id uniqueID) (uintptr, error) {
	type result struct {
		h   uintptr
		err error
	}
	done := make(chan result, 1)
	var mu sync.Mutex
	abandoned := false
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- result{err: fmt.Errorf("ncclCommInitRank %w: %v", transport.ErrPanicked, v)}
			}
		}()
		var h uintptr
		err := t.onDevice(func() error {
			return t.lib.ncclErr("ncclCommInitRank", t.lib.ncclCommInitRank(&h, int32(len(g.ranks)), id, int32(g.rank)))
		})
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			if err == nil {
				t.lib.ncclCommAbort(h)
			}
			return
		}
		done <- result{h, err}
	}()
	abandon := func() {
		mu.Lock()
		abandoned = true
		mu.Unlock()
		select {
		case r := <-done: // it returned meanwhile
			if r.err == nil {
				t.lib.ncclCommAbort(r.h)
			}
		default:
		}
	}
	timer := time.NewTimer(t.cfg.TCP.Timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			return 0, fmt.Errorf("create the communicator of %d members on device %d: %w", len(g.ranks), t.device, r.err)
		}
		return r.h, nil
	case <-t.failed:
		abandon()
		return 0, t.err
	case <-timer.C:
		abandon()
		return 0, fmt.Errorf("%w: ncclCommInitRank did not return within %v (PPGEN_TIMEOUT): a member did not join the group's communicator; do all members build it, in the same order?", transport.ErrTimeout, t.cfg.TCP.Timeout)
	}
}

func (g *group) Rank() int { return g.rank }
func (g *group) Size() int { return len(g.ranks) }

func (g *group) err(call string, err error) error {
	return fmt.Errorf("transport: rank %d: %s (member %d of world ranks %v): %w", g.t.rank, call, g.rank, g.ranks, err)
}

// collBuf is a tensor's elements as NCCL sees them.
type collBuf struct {
	raw []byte
	n   int   // elements
	dt  int32 // ncclFloat32 or ncclFloat64
	es  int   // bytes per element
}

// bufOf reads x: a plain float32 or float64 tensor, within MaxMessageBytes.
func (g *group) bufOf(x *tensor.Dense, what string) (collBuf, error) {
	p, err := wire.Plain(x)
	if err != nil {
		return collBuf{}, fmt.Errorf("%s: %w", what, err)
	}
	b := collBuf{raw: p.Raw, n: p.N, dt: ncclFloat32, es: 4}
	if p.Dtype == wire.Float64 {
		b.dt, b.es = ncclFloat64, 8
	}
	if max := g.t.cfg.MaxMessageBytes; int64(len(b.raw)) > max {
		return collBuf{}, fmt.Errorf("%s: tensor of shape %v is %d bytes, over %d (MaxMessageBytes): raise Config.MaxMessageBytes or split it", what, x.Shape(), len(b.raw), max)
	}
	return b, nil
}

// pair reads a collective's input and output, of one dtype.
func (g *group) pair(in, out *tensor.Dense, call string) (bi, bo collBuf, err error) {
	if bi, err = g.bufOf(in, call+" (input)"); err != nil {
		return
	}
	if bo, err = g.bufOf(out, call+" (output)"); err != nil {
		return
	}
	if bi.dt != bo.dt {
		err = fmt.Errorf("%s: input %v and output %v; want one dtype", call, in.Dtype(), out.Dtype())
	}
	return
}

// span is a host buffer and its offset in the group's device buffer.
type span struct {
	raw []byte
	off uintptr
}

func alignUp(n int) uintptr { return (uintptr(n) + deviceAlign - 1) &^ (deviceAlign - 1) }

// run runs one collective on the group's communicator: the in spans are
// copied to the device buffer (total bytes), calls queues the NCCL work
// (base: the device buffer's address), the stream is waited for, and the
// out spans are copied back; every wait is bounded by the progress
// timeout. A failure fails the transport, telling the peers, as a failed
// Send does; a timeout fails it without (no member to blame).
func (g *group) run(call string, total uintptr, in, out []span, calls func(base uintptr) int32) error {
	t := g.t
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.closed.Load() {
		return g.err(call, transport.ErrClosed)
	}
	if t.isFailed() {
		return g.err(call, t.err)
	}
	if total == 0 {
		return nil // nothing moves (every member has no elements)
	}
	stuckErr := g.err(call, fmt.Errorf("%w: no progress for %v (PPGEN_TIMEOUT): a member of world ranks %v has not started this collective, or has failed; members must run the same collectives in the same order",
		transport.ErrTimeout, t.cfg.TCP.Timeout, g.ranks))
	stuck := func() error {
		t.fail(stuckErr)
		return stuckErr
	}
	l, c := t.lib, g.c
	err := t.onDevice(func() error {
		if err := t.ensureArena(c, total); err != nil {
			return err
		}
		for _, s := range in {
			r := l.memcpyH2D(c.arena+s.off, unsafe.Pointer(unsafe.SliceData(s.raw)), uintptr(len(s.raw)), cudaMemcpyHostToDev, c.stream)
			if err := l.cudaErr("cudaMemcpyAsync (host to device)", r); err != nil {
				return err
			}
		}
		if err := t.issueOn(c, func() { stuck() }, func() error { return l.ncclErr(call, calls(c.arena)) }); err != nil {
			return err
		}
		if err := t.waitStream(c, stuck); err != nil {
			return err
		}
		for _, s := range out {
			r := l.memcpyD2H(unsafe.Pointer(unsafe.SliceData(s.raw)), c.arena+s.off, uintptr(len(s.raw)), cudaMemcpyDevToHost, c.stream)
			if err := l.cudaErr("cudaMemcpyAsync (device to host)", r); err != nil {
				return err
			}
		}
		return t.waitStream(c, stuck)
	})
	runtime.KeepAlive(in)
	runtime.KeepAlive(out)
	if err == nil {
		return nil
	}
	if err == stuckErr {
		return err
	}
	if e := g.err(call, err); t.record(e, e) {
		t.abortComms()
		return e
	}
	return g.err(call, t.err) // the transport had failed: its error names the cause
}

// AllReduceSum replaces x with the element-wise sum over the members
// (ncclAllReduce, in place).
func (g *group) AllReduceSum(x *tensor.Dense) error {
	const call = "ncclAllReduce"
	b, err := g.bufOf(x, call)
	if err != nil {
		return g.err(call, err)
	}
	s := []span{{b.raw, 0}}
	return g.run(call, uintptr(len(b.raw)), s, s, func(base uintptr) int32 {
		return g.t.lib.ncclAllReduce(base, base, uintptr(b.n), b.dt, ncclSum, g.c.handle, g.c.stream)
	})
}

// AllGather fills buf's chunks from the members' (ncclAllGather, in place:
// only this member's chunk goes to the device).
func (g *group) AllGather(buf *tensor.Dense) error {
	const call = "ncclAllGather"
	b, err := g.bufOf(buf, call)
	if err != nil {
		return g.err(call, err)
	}
	n := g.Size()
	if b.n == 0 || b.n%n != 0 {
		return g.err(call, fmt.Errorf("buffer of %d elements is not a positive multiple of the %d members", b.n, n))
	}
	kb := b.n / n * b.es
	own := uintptr(g.rank * kb)
	return g.run(call, uintptr(len(b.raw)), []span{{b.raw[g.rank*kb : (g.rank+1)*kb], own}}, []span{{b.raw, 0}}, func(base uintptr) int32 {
		return g.t.lib.ncclAllGather(base+own, base, uintptr(b.n/n), b.dt, g.c.handle, g.c.stream)
	})
}

// ReduceScatterSum sets out to this member's chunk of the sum of in over
// the members (ncclReduceScatter).
func (g *group) ReduceScatterSum(in, out *tensor.Dense) error {
	const call = "ncclReduceScatter"
	bi, bo, err := g.pair(in, out, call)
	if err != nil {
		return g.err(call, err)
	}
	if bo.n == 0 || bi.n != bo.n*g.Size() {
		return g.err(call, fmt.Errorf("input %v and output %v: want %d times the output's elements (at least 1) in the input", in.Shape(), out.Shape(), g.Size()))
	}
	off := alignUp(len(bi.raw))
	return g.run(call, off+uintptr(len(bo.raw)), []span{{bi.raw, 0}}, []span{{bo.raw, off}}, func(base uintptr) int32 {
		return g.t.lib.ncclReduceScatter(base, base+off, uintptr(bo.n), bo.dt, ncclSum, g.c.handle, g.c.stream)
	})
}

// Broadcast copies member root's x into every member's x (ncclBroadcast,
// in place: only the root's goes to the device, only the others' comes
// back).
func (g *group) Broadcast(x *tensor.Dense, root int) error {
	const call = "ncclBroadcast"
	if root < 0 || root >= g.Size() {
		return g.err(call, fmt.Errorf("root %d outside [0, %d)", root, g.Size()))
	}
	b, err := g.bufOf(x, call)
	if err != nil {
		return g.err(call, err)
	}
	var in, out []span
	if g.rank == root {
		in = []span{{b.raw, 0}}
	} else {
		out = []span{{b.raw, 0}}
	}
	return g.run(call, uintptr(len(b.raw)), in, out, func(base uintptr) int32 {
		return g.t.lib.ncclBroadcast(base, base, uintptr(b.n), b.dt, int32(root), g.c.handle, g.c.stream)
	})
}

// AllToAll sets chunk m of out to member m's chunk Rank() of in: one NCCL
// group of an ncclSend and an ncclRecv per member (this one included).
func (g *group) AllToAll(in, out *tensor.Dense) error {
	const call = "ncclSend/ncclRecv (all-to-all)"
	bi, bo, err := g.pair(in, out, call)
	if err != nil {
		return g.err(call, err)
	}
	n := g.Size()
	if bi.n != bo.n || bi.n == 0 || bi.n%n != 0 {
		return g.err(call, fmt.Errorf("input %v and output %v: want equal element counts, a positive multiple of the %d members", in.Shape(), out.Shape(), n))
	}
	k := bi.n / n
	kb := uintptr(k * bi.es)
	off := alignUp(len(bi.raw))
	l := g.t.lib
	return g.run(call, off+uintptr(len(bo.raw)), []span{{bi.raw, 0}}, []span{{bo.raw, off}}, func(base uintptr) int32 {
		if r := l.ncclGroupStart(); r != ncclSuccess {
			return r
		}
		first := int32(ncclSuccess)
		for m := range n {
			r := l.ncclSend(base+uintptr(m)*kb, uintptr(k), bi.dt, int32(m), g.c.handle, g.c.stream)
			if r2 := l.ncclRecv(base+off+uintptr(m)*kb, uintptr(k), bi.dt, int32(m), g.c.handle, g.c.stream); r == ncclSuccess {
				r = r2
			}
			if first == ncclSuccess {
				first = r
			}
		}
		if r := l.ncclGroupEnd(); first == ncclSuccess {
			first = r
		}
		return first
	})
}
