//go:build mpi

package mpi

/*
#include <stdlib.h>
#include <mpi.h>

#include "shim.h"

static MPI_Datatype ppg_dtype(int f64) { return f64 ? MPI_DOUBLE : MPI_FLOAT; }

// ppg_group_comm creates the communicator of the n ranks of the
// transport's communicator (MPI_Comm_create_group: collective over those
// ranks only), its errors returned. *out is C memory.
static int ppg_group_comm(int *ranks, int n, int tag, MPI_Comm **out) {
	MPI_Comm parent = ppg_parent_comm();
	MPI_Group world, g;
	int err = MPI_Comm_group(parent, &world);
	if (err != MPI_SUCCESS) {
		return err;
	}
	err = MPI_Group_incl(world, n, ranks, &g);
	MPI_Group_free(&world);
	if (err != MPI_SUCCESS) {
		return err;
	}
	MPI_Comm *c = malloc(sizeof(MPI_Comm));
	err = MPI_Comm_create_group(parent, g, tag, c);
	MPI_Group_free(&g);
	if (err != MPI_SUCCESS) {
		free(c);
		return err;
	}
	err = MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
	if (err != MPI_SUCCESS) {
		MPI_Comm_free(c);
		free(c);
		return err;
	}
	*out = c;
	return MPI_SUCCESS;
}

static int ppg_comm_free(MPI_Comm *c) {
	int err = MPI_Comm_free(c);
	free(c);
	return err;
}

static int ppg_iallreduce(void *buf, int n, int f64, MPI_Comm *c, MPI_Request *req) {
	return MPI_Iallreduce(MPI_IN_PLACE, buf, n, ppg_dtype(f64), MPI_SUM, *c, req);
}

static int ppg_iallgather_inplace(void *buf, int k, int f64, MPI_Comm *c, MPI_Request *req) {
	return MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, k, ppg_dtype(f64), *c, req);
}

static int ppg_ireduce_scatter(void *in, void *out, int k, int f64, MPI_Comm *c, MPI_Request *req) {
	return MPI_Ireduce_scatter_block(in, out, k, ppg_dtype(f64), MPI_SUM, *c, req);
}

static int ppg_ibcast(void *buf, int n, int f64, int root, MPI_Comm *c, MPI_Request *req) {
	return MPI_Ibcast(buf, n, ppg_dtype(f64), root, *c, req);
}

static int ppg_ialltoall(void *in, void *out, int k, int f64, MPI_Comm *c, MPI_Request *req) {
	return MPI_Ialltoall(in, k, ppg_dtype(f64), out, k, ppg_dtype(f64), *c, req);
}

static int ppg_test_coll(MPI_Request *req, int *done) { return MPI_Test(req, done, MPI_STATUS_IGNORE); }
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
	"gorgonia.org/tensor"
)

// The MPI transport's native collectives ([Collectives]): a group is an
// MPI communicator of its world ranks (MPI_Comm_create_group on the
// transport's own duplicate of MPI_COMM_WORLD, errors returned), and each
// collective is MPI's non-blocking one (MPI_Iallreduce, MPI_Iallgather in
// place, MPI_Ireduce_scatter_block, MPI_Ibcast, MPI_Ialltoall) on the
// tensors' own memory,
// pinned while MPI holds it, polled as the point-to-point operations are,
// so every wait is bounded by the progress timeout and an abort from any
// rank ends it with that rank named.

// mpiGroupTag is MPI_Comm_create_group's tag: NewGroup calls are
// serialized within a process, so one tag tells them apart.
const mpiGroupTag = 0x7067 // "pg"

// mpiGroup is one group communicator.
type mpiGroup struct {
	t     *mpiT
	comm  *C.MPI_Comm // C memory
	ranks []int       // world ranks, member order
	rank  int         // this member
}

var _ transport.Collectives = (*mpiT)(nil)

// NewGroup creates the MPI communicator of ranks (see [Collectives]).
func (t *mpiT) NewGroup(ranks []int) (transport.Group, error) {
	if err := t.usable(); err != nil {
		return nil, fmt.Errorf("transport: rank %d: MPI group %v: %w", t.rank, ranks, err)
	}
	self, err := transport.GroupMember("MPI", t.rank, t.world, ranks)
	if err != nil {
		return nil, err
	}
	t.groupMu.Lock()
	defer t.groupMu.Unlock()
	cr := make([]C.int, len(ranks))
	for i, r := range ranks {
		cr[i] = C.int(r)
	}
	type result struct {
		comm *C.MPI_Comm
		code C.int
	}
	// MPI_Comm_create_group blocks until every member called it: on its
	// own goroutine, so that the wait is bounded (a member that never
	// joins leaves it blocked, and the transport failed).
	res := make(chan result, 1)
	go func() {
		var c *C.MPI_Comm
		code := C.ppg_group_comm(&cr[0], C.int(len(cr)), C.int(mpiGroupTag), &c)
		res <- result{c, code}
	}()
	timer := time.NewTimer(t.cfg.Timeout)
	defer timer.Stop()
	select {
	case r := <-res:
		if r.code != C.MPI_SUCCESS {
			err := fmt.Errorf("transport: rank %d: MPI group %v: %w", t.rank, ranks, mpiError("MPI_Comm_create_group", r.code))
			t.fail(err)
			return nil, err
		}
		g := &mpiGroup{t: t, comm: r.comm, ranks: append([]int(nil), ranks...), rank: self}
		t.groups = append(t.groups, g)
		return g, nil
	case <-t.failed:
		return nil, t.err
	case <-timer.C:
		err := fmt.Errorf("transport: rank %d: MPI group %v: %w: not every member joined the group's communicator (MPI_Comm_create_group) within %v (%s); do all members build it, in the same order?",
			t.rank, ranks, transport.ErrTimeout, t.cfg.Timeout, t.setting)
		t.fail(err)
		return nil, err
	}
}

// freeGroups frees the group communicators (Close, before MPI_Finalize).
func (t *mpiT) freeGroups() {
	t.groupMu.Lock()
	defer t.groupMu.Unlock()
	for _, g := range t.groups {
		if code := C.ppg_comm_free(g.comm); code != C.MPI_SUCCESS {
			t.cfg.Logger.Warn("transport: MPI: freeing a group communicator failed", "rank", t.rank, "group", g.ranks, "err", mpiErrString(code))
		}
		g.comm = nil
	}
	t.groups = nil
}

func (g *mpiGroup) Rank() int { return g.rank }
func (g *mpiGroup) Size() int { return len(g.ranks) }

// collBuf is a tensor's elements as MPI sees them.
type collBuf struct {
	p   unsafe.Pointer // the first element (nil when empty)
	n   int            // elements
	f64 C.int
}

func collBufOf(x *tensor.Dense, what string) (collBuf, error) {
	p, err := wire.Plain(x)
	if err != nil {
		return collBuf{}, fmt.Errorf("%s: %w", what, err)
	}
	if p.N > math.MaxInt32 {
		return collBuf{}, fmt.Errorf("%s: tensor of %d elements; MPI counts are C ints, at most %d (split it, or use runtime/collective's Send/Recv algorithms)", what, p.N, math.MaxInt32)
	}
	b := collBuf{n: p.N}
	if p.N > 0 {
		b.p = unsafe.Pointer(&p.Raw[0])
	}
	if p.Dtype == wire.Float64 {
		b.f64 = 1
	}
	return b, nil
}

// run starts one non-blocking collective (start posts it on req) on the
// buffers bufs, pinned until it completed, and polls it to completion,
// bounded by the progress timeout. A failure fails the transport; the
// buffers of a collective that did not complete stay pinned for ever (MPI
// may still write them).
func (g *mpiGroup) run(call string, start func(req *C.MPI_Request) C.int, bufs ...collBuf) error {
	t := g.t
	if err := t.usable(); err != nil {
		return g.err(call, err)
	}
	if g.comm == nil {
		return g.err(call, transport.ErrClosed)
	}
	op := &mpiOp{peer: -1, hreq: newRequest()}
	for _, b := range bufs {
		if b.p != nil {
			op.pin.Pin(b.p)
			op.pinned = true
		}
	}
	if code := start(op.hreq); code != C.MPI_SUCCESS {
		op.release()
		err := g.err(call, mpiError(call, code))
		t.fail(err)
		return err
	}
	err := t.poll(func() (bool, error) {
		var done C.int
		if code := C.ppg_test_coll(op.hreq, &done); code != C.MPI_SUCCESS {
			return false, mpiError("MPI_Test ("+call+")", code)
		}
		return done != 0, nil
	})
	if err == nil {
		op.release()
		return nil
	}
	t.leak(op)
	if errors.Is(err, wire.ErrNoProgress) {
		err = g.err(call, fmt.Errorf("%w: no progress for %v (%s): a member of world ranks %v has not started this collective, or has failed; members must run the same collectives in the same order",
			transport.ErrTimeout, t.cfg.Timeout, t.setting, g.ranks))
		t.fail(err)
		return err
	}
	if err != t.err { // t.err: the transport had already failed (an abort names its rank)
		err = g.err(call, err)
		t.fail(err)
	}
	return err
}

func (g *mpiGroup) err(call string, err error) error {
	return fmt.Errorf("transport: rank %d: %s (member %d of world ranks %v): %w", g.t.rank, call, g.rank, g.ranks, err)
}

func (g *mpiGroup) AllReduceSum(x *tensor.Dense) error {
	const call = "MPI_Iallreduce"
	b, err := collBufOf(x, call)
	if err != nil {
		return g.err(call, err)
	}
	return g.run(call, func(req *C.MPI_Request) C.int {
		return C.ppg_iallreduce(b.p, C.int(b.n), b.f64, g.comm, req)
	}, b)
}

func (g *mpiGroup) AllGather(buf *tensor.Dense) error {
	const call = "MPI_Iallgather"
	b, err := collBufOf(buf, call)
	if err != nil {
		return g.err(call, err)
	}
	if b.n == 0 || b.n%g.Size() != 0 {
		return g.err(call, fmt.Errorf("buffer of %d elements is not a positive multiple of the %d members", b.n, g.Size()))
	}
	return g.run(call, func(req *C.MPI_Request) C.int {
		return C.ppg_iallgather_inplace(b.p, C.int(b.n/g.Size()), b.f64, g.comm, req)
	}, b)
}

// collBufPair is collBufOf of a collective's input and output.
func collBufPair(in, out *tensor.Dense, call string) (bi, bo collBuf, err error) {
	if bi, err = collBufOf(in, call+" (input)"); err == nil {
		bo, err = collBufOf(out, call+" (output)")
	}
	return bi, bo, err
}

func (g *mpiGroup) ReduceScatterSum(in, out *tensor.Dense) error {
	const call = "MPI_Ireduce_scatter_block"
	bi, bo, err := collBufPair(in, out, call)
	if err != nil {
		return g.err(call, err)
	}
	if bi.f64 != bo.f64 || bo.n == 0 || bi.n != bo.n*g.Size() {
		return g.err(call, fmt.Errorf("input %v %v and output %v %v: want the output's dtype and %d times its elements (at least 1) in the input", in.Dtype(), in.Shape(), out.Dtype(), out.Shape(), g.Size()))
	}
	return g.run(call, func(req *C.MPI_Request) C.int {
		return C.ppg_ireduce_scatter(bi.p, bo.p, C.int(bo.n), bo.f64, g.comm, req)
	}, bi, bo)
}

func (g *mpiGroup) Broadcast(x *tensor.Dense, root int) error {
	const call = "MPI_Ibcast"
	if root < 0 || root >= g.Size() {
		return g.err(call, fmt.Errorf("root %d outside [0, %d)", root, g.Size()))
	}
	b, err := collBufOf(x, call)
	if err != nil {
		return g.err(call, err)
	}
	return g.run(call, func(req *C.MPI_Request) C.int {
		return C.ppg_ibcast(b.p, C.int(b.n), b.f64, C.int(root), g.comm, req)
	}, b)
}

func (g *mpiGroup) AllToAll(in, out *tensor.Dense) error {
	const call = "MPI_Ialltoall"
	bi, bo, err := collBufPair(in, out, call)
	if err != nil {
		return g.err(call, err)
	}
	if bi.f64 != bo.f64 || bi.n != bo.n || bi.n == 0 || bi.n%g.Size() != 0 {
		return g.err(call, fmt.Errorf("input %v %v and output %v %v: want one dtype and equal element counts, a positive multiple of the %d members", in.Dtype(), in.Shape(), out.Dtype(), out.Shape(), g.Size()))
	}
	return g.run(call, func(req *C.MPI_Request) C.int {
		return C.ppg_ialltoall(bi.p, bo.p, C.int(bi.n/g.Size()), bo.f64, g.comm, req)
	}, bi, bo)
}
