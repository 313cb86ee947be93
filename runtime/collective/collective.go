// Package collective implements the collectives of data parallelism over a
// group's [transport.Transport]: [Comm.AllReduce] (sum), [Comm.AllGather],
// [Comm.ReduceScatter] (sum) and [Comm.Broadcast] of float32 and float64
// tensors. Its own algorithms use only Send and Recv (paired through
// [transport.Batch], so a transport that batches — MPI, NCCL — runs each
// step as one group), and so run unchanged on every transport: in-process,
// TCP, MPI, NCCL, or a group view of one (runtime/mesh). A transport with
// native collectives (MPI, NCCL) runs them instead; see "Native
// collectives".
//
// # Algorithms and order
//
// A tensor of L elements is taken flat and padded with zeros to n·k
// elements, k = ⌈L/n⌉, n the group size: chunk c is elements [c·k, (c+1)·k).
//
//   - ReduceScatter is a pairwise exchange: n-1 steps; at step s (1..n-1)
//     member r sends its chunk (r+s) mod n to member (r+s) mod n and
//     receives member (r-s) mod n's chunk r. Then it sums chunk r over the
//     members in member order, left to right:
//     (…((x[0] + x[1]) + x[2]) + …) + x[n-1], x[m] member m's chunk. The
//     order is the same for every element and every transport, so results
//     are bit-reproducible run to run and equal a sequential loop over the
//     members (which is what lets a data-parallel run equal, bit for bit,
//     sequential training that sums its gradients per replica block in
//     replica order). Each member sends and receives (n-1)·k elements, as
//     in a ring reduce-scatter, whose sums would instead start at a
//     different member for every chunk; it holds the n-1 received chunks
//     until it sums them.
//   - AllGather is the ring all-gather: n-1 steps; at step s member r sends
//     chunk (r-s) mod n to member r+1 and receives chunk (r-s-1) mod n from
//     member r-1. Chunks are copied, never combined.
//   - AllReduce is ReduceScatter then AllGather: every member gets the same
//     bits, every element summed in member order.
//   - Broadcast is a pipelined chain from the root: the tensor cut into n
//     chunks, member root+i forwards each chunk to root+i+1 as soon as it
//     has it.
//
// Each member sends 2(n-1)/n · L elements for AllReduce, (n-1)/n · L for
// ReduceScatter and AllGather: the bandwidth-optimal volumes.
//
// # Native collectives
//
// When the group's transport, or the world transport under a runtime/mesh
// view (View.Parent, with the view's world ranks), implements
// [transport.Collectives] — the MPI transport and the NCCL transport
// (runtime/transport/nccl) do — a Comm runs the engine's collectives on a
// communicator of the group's world ranks, built on its first collective
// (collective over the members only: MPI_Comm_create_group; for NCCL a
// fresh unique id sent by member 0 over the control connection, then
// ncclCommInitRank; Comms over one group must make their first collective
// in the same order on every member). [SendRecv] keeps this package's
// algorithms instead; [Comm.Native] says which a Comm runs. Padding and
// results are as above: ReduceScatter's chunks are ChunkLen elements of
// the zero-padded tensor, AllGather's shards concatenate in member order.
//
// The engine's reduction order is its own: fixed for a given engine build
// and settings, member count and element count (OpenMPI picks the
// algorithm of its non-blocking collectives from those), so results are
// bit-reproducible run to run and the same bits on every member (tested
// under mpirun: two jobs, four members, equal bits), but it is not the
// member order above. NCCL's is its algorithm's: a ring all-reduce or
// reduce-scatter sums each chunk around the ring starting at a different
// member, a tree all-reduce up the tree; which one runs depends on the NCCL
// version, the topology, the size and NCCL_ALGO / NCCL_PROTO, so it is
// fixed for a given machine, build and size but undocumented, and not the
// member order either (the tests' C double of NCCL sums in rank order,
// which is the member order, so its results are checked bit for bit). With
// two members the sum is x[0] + x[1] either way
// (IEEE addition commutes), so a two-member group — -dp 2 — equals the
// member order bit for bit; with more, results differ from it by
// reassociation: tested within 1e-12 (float64) and 1e-5 (float32) of the
// sum of the members' magnitudes (measured: 2.2e-16 and 1.2e-7 on four
// members). Through training the difference compounds: examples/mlp
// -check at -dp 4 over MPI measures up to 9.2e-14 (float64) and 4.6e-5
// (float32, per parameter on the smallest ones) against its replica-order
// reference, so it holds float32 with MPI's sums beyond two members to
// 1e-4. NCCL's sums are a reassociation too, held to the same bounds by
// the GPU check (scripts/gpu-nccl.sh; not measured: no GPU was available).
// [MemberOrder] keeps the member order on the engine: its reductions
// become the engine's all-to-all (each member receives every member's copy
// of its chunk; NCCL's is one group of ncclSend and ncclRecv) summed here
// in member order, then (all-reduce) its all-gather, so the bits are the
// Send/Recv algorithms' at any size (the all-to-all moves as much as a
// reduce-scatter; the sums run on the host).
// Elements per collective are then at most math.MaxInt32 for MPI (its
// counts are C ints); NCCL's are bounded by the transport's
// MaxMessageBytes per tensor.
//
// # Failure
//
// Every wait is a transport Recv or Send, bounded by the transport's
// progress timeout. An error is an [*Error] that names the collective, this
// member, the step and the member it was exchanging with, and wraps the
// transport's error (so errors.As finds the transport's
// *transport.PeerError, which names the failed rank). Messages carry a tag
// with the collective's sequence number and step.
//
// Before any data moves, the members agree on the collective: each sends
// a header of what it runs — operation, mode (send/recv, native or
// member-order), dtype, element count (AllGather's: the shard's), root
// (Broadcast) and sequence number — in a ring all-gather over Send and
// Recv (n-1 steps of a 48-byte message; in every mode for a Comm's first
// collective, so that members in different modes meet there; a native
// Comm's later headers go through the engine's all-gather), and compares
// every member's with its own.
// A difference fails the collective on every member with an [*Error]
// naming the first member that differs, wrapping a [*MismatchError] that
// names the field and both values ("all-reduce #12: member 3 sends 7
// elements, this member 8"; errors.Is [ErrMismatch] and
// transport.ErrProtocol), where the data would otherwise be combined
// silently wrong (an 8- and a 7-element all-reduce over 4 members have the
// same chunks) or, natively, end in the engine. On a small all-reduce (16
// float32, 4 members, one 2-core machine shared with other work) it costs
// 0.03–0.2 ms: loopback TCP 0.42 ms against 0.31 ms; MPI native 0.08–0.11 ms
// against 0.046 ms, MPI send/recv 0.33–0.42 ms against 0.21 ms; on 16 MiB
// nothing measurable.
// A native collective's wait is the engine's request, polled under the same
// progress timeout; a rank that aborts fails it on every other member with
// the aborted rank named (Step and Peer are then -1).
package collective

import (
	"errors"
	"fmt"
	"math"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
)

// MaxElems bounds the elements of one collective's tensor (padded).
const MaxElems = min(1<<40, math.MaxInt)

// Comm runs collectives on one group transport. Its methods must be called
// in the same order on every member, from one goroutine at a time (or
// through [Async], which queues them in order).
type Comm struct {
	t   transport.Transport
	ch  abi.Channel
	seq uint32

	// The engine's collectives, when the transport has them (see the
	// package doc, "Native collectives"): eng builds the group's
	// communicator of the world ranks ranks on the first collective.
	eng     transport.Collectives
	ranks   []int
	group   transport.Group
	ordered bool // MemberOrder: the engine moves the data, the sums are in member order
}

// Option configures New.
type Option func(*Comm)

// SendRecv makes the Comm use the package's algorithms over Send and Recv
// even when the transport has native collectives (to compare the two, or
// to have the member-order sums of the package doc on MPI too).
func SendRecv() Option { return func(c *Comm) { c.eng, c.ranks = nil, nil } }

// MemberOrder keeps the engine's data movement but sums in member order:
// a reduction is the engine's all-to-all (each member receives every
// member's copy of its chunk), summed here left to right over the members
// as the Send/Recv algorithms do, then (all-reduce) the engine's
// all-gather. Results are then the same bits as the Send/Recv algorithms'
// on any transport. Without native collectives it changes nothing.
func MemberOrder() Option { return func(c *Comm) { c.ordered = true } }

// parented is a group view of a world transport (runtime/mesh's View).
type parented interface {
	Ranks() []int
	Parent() transport.Transport
}

// New returns a Comm on t: collectives among t's World() members. ch is the
// channel the collectives use (any channel no other traffic of t uses
// between the same members; a runtime/mesh DP group view shares no pair of
// ranks with its pipeline, so abi.ActChannel is fine there). When t, or the
// world transport t is a view of, has native collectives
// ([transport.Collectives], MPI), the Comm runs them, unless opts holds
// [SendRecv].
func New(t transport.Transport, ch abi.Channel, opts ...Option) (*Comm, error) {
	if t == nil {
		return nil, errors.New("collective: nil transport")
	}
	if !wire.ValidChannel(ch) {
		return nil, fmt.Errorf("collective: channel %d; want act, grad or data", uint8(ch))
	}
	c := &Comm{t: t, ch: ch}
	if v, ok := t.(parented); ok {
		if e, ok := v.Parent().(transport.Collectives); ok {
			c.eng, c.ranks = e, v.Ranks()
		}
	} else if e, ok := t.(transport.Collectives); ok {
		c.eng, c.ranks = e, make([]int, t.World())
		for i := range c.ranks {
			c.ranks[i] = i
		}
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Native reports whether the Comm runs the engine's collectives rather
// than the package's algorithms over Send and Recv.
func (c *Comm) Native() bool { return c != nil && c.eng != nil }

// native returns the engine's group communicator, built on first use (nil
// without native collectives or with one member, where nothing moves).
func (c *Comm) native(op string) (transport.Group, error) {
	if c.eng == nil || c.Size() == 1 {
		return nil, nil
	}
	if c.group == nil {
		g, err := c.eng.NewGroup(c.ranks)
		if err != nil {
			return nil, c.fail(op, -1, -1, err)
		}
		if g.Size() != c.Size() || g.Rank() != c.Rank() {
			return nil, c.fail(op, -1, -1, fmt.Errorf("the engine's group is member %d of %d, the transport's %d of %d (%w)", g.Rank(), g.Size(), c.Rank(), c.Size(), transport.ErrProtocol))
		}
		c.group = g
	}
	return c.group, nil
}

// nativeErr wraps a native collective's error.
func (c *Comm) nativeErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return c.fail(op, -1, -1, err)
}

// Rank is this member's index in the group.
func (c *Comm) Rank() int { return c.t.Rank() }

// Size is the number of members.
func (c *Comm) Size() int { return c.t.World() }

// Transport is the group transport.
func (c *Comm) Transport() transport.Transport { return c.t }

// Error is a failed collective.
type Error struct {
	Op    string // "all-reduce", "all-gather", "reduce-scatter", "broadcast"
	Rank  int    // this member
	Size  int    // members
	Step  int    // the step that failed, from 0; -1 before the first
	Peer  int    // the member exchanged with at Step; -1 if none
	World int    // Peer's world rank when the transport is a group view, else -1
	Err   error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("collective: %s (member %d of %d)", e.Op, e.Rank, e.Size)
	if e.Step >= 0 {
		s += fmt.Sprintf(", step %d", e.Step)
	}
	if e.Peer >= 0 {
		s += fmt.Sprintf(", with member %d", e.Peer)
		if e.World >= 0 {
			s += fmt.Sprintf(" (world rank %d)", e.World)
		}
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// worldRanker is implemented by group views (runtime/mesh).
type worldRanker interface{ WorldRank(int) int }

func (c *Comm) fail(op string, step, peer int, err error) error {
	w := -1
	if v, ok := c.t.(worldRanker); ok && peer >= 0 && peer < c.Size() {
		w = v.WorldRank(peer)
	}
	return &Error{Op: op, Rank: c.Rank(), Size: c.Size(), Step: step, Peer: peer, World: w, Err: err}
}

// Operation codes in tags.
const (
	opAllReduce = 1 + iota
	opAllGather
	opReduceScatter
	opBroadcast
	opHeader // the header exchange before each collective (check.go)
)

var opNames = map[int]string{opAllReduce: "all-reduce", opAllGather: "all-gather", opReduceScatter: "reduce-scatter", opBroadcast: "broadcast", opHeader: "header"}

// tag of step s of the current collective (sequence number c.seq). The
// header exchange's tags carry no sequence number (stage 0), so that
// members at different sequence numbers meet in it and compare them.
func (c *Comm) tag(op, s int) transport.Tag {
	stage := int32(c.seq & math.MaxInt32)
	if op == opHeader {
		stage = 0
	}
	return transport.Tag{Stage: stage, Micro: int32(op<<24 | s&0xffffff)}
}

// flat is a tensor's elements, float32 or float64.
type flat interface{ ~float32 | ~float64 }

// elems returns x's backing elements (the first n of them) and its dtype.
func elems(op string, x *tensor.Dense) (f32 []float32, f64 []float64, n int, err error) {
	p, err := wire.Plain(x)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("collective: %s: %w", op, err)
	}
	if p.N > MaxElems {
		return nil, nil, 0, fmt.Errorf("collective: %s: tensor of %d elements; at most %d", op, p.N, int64(MaxElems))
	}
	if p.Dtype == wire.Float32 {
		return x.Float32s()[:p.N], nil, p.N, nil
	}
	return nil, x.Float64s()[:p.N], p.N, nil
}

// ChunkLen is k = ⌈length/n⌉, the elements of each member's chunk (shard) of
// a tensor of length elements over n members (at least 1 element, so that
// an empty tensor still has a shape).
func ChunkLen(length, n int) int {
	if n < 1 {
		return 0
	}
	return max((length+n-1)/n, 1)
}

func (c *Comm) begin(op string) error {
	if c == nil || c.t == nil {
		return fmt.Errorf("collective: %s: nil Comm (build it with New)", op)
	}
	c.seq++
	return nil
}

// start begins collective op on x: it counts the collective and returns
// x's elements (elems).
func (c *Comm) start(op string, x *tensor.Dense) (f32 []float32, f64 []float64, n int, err error) {
	if err := c.begin(op); err != nil {
		return nil, nil, 0, err
	}
	return elems(op, x)
}

// startInto is start for a buffer the caller owns, of n·k elements over
// the n members (the ...Into collectives): it returns k and the engine's
// group (nil: the Send/Recv algorithms run).
func (c *Comm) startInto(op string, buf *tensor.Dense) (f32 []float32, f64 []float64, k int, g transport.Group, err error) {
	f32, f64, L, err := c.start(op, buf)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	n := c.Size()
	if L == 0 || L%n != 0 {
		return nil, nil, 0, nil, fmt.Errorf("collective: %s: buffer of %d elements is not a positive multiple of the %d members; pad it to n·ChunkLen", op, L, n)
	}
	count := L // reduce-scatter: the tensor's elements
	if op == "all-gather" {
		count = L / n // the shard's, as AllGather's
	}
	if err := c.agree(op, buf.Dtype(), count, -1); err != nil {
		return nil, nil, 0, nil, err
	}
	g, err = c.native(op)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	return f32, f64, L / n, g, nil
}

// sizeOK checks that n·k elements fit.
func sizeOK(op string, n, k int) error {
	if k > MaxElems/n {
		return fmt.Errorf("collective: %s: %d members × %d elements is over %d", op, n, k, int64(MaxElems))
	}
	return nil
}
