package transport

import (
	"fmt"

	"gorgonia.org/tensor"
)

// Collectives is implemented by a transport whose engine runs collectives
// natively (the MPI transport, runtime/transport/mpi, build tag mpi; the
// NCCL transport, runtime/transport/nccl): runtime/collective uses it,
// when the transport of a group (or the world transport under a
// runtime/mesh view) provides it, instead of its own algorithms over Send
// and Recv.
type Collectives interface {
	// NewGroup returns a communicator for collectives among the world
	// ranks ranks (distinct, in member order: member i is world rank
	// ranks[i]; this rank is one of them). It is collective over the
	// members: every member calls it, and members that build several
	// groups build them in the same order. It waits, bounded by the
	// transport's progress timeout, until every member has joined.
	NewGroup(ranks []int) (Group, error)
}

// Group runs collectives among its members, natively. Its methods must be
// called in the same order on every member, one at a time; every wait is
// bounded by the transport's progress timeout, and a failure fails the
// transport (the engine's collective state is then unknown), as a failed
// Send does. Tensors are plain (not views) float32 or float64 tensors of
// the same dtype and element count on every member; element counts are at
// most math.MaxInt32 for MPI (its counts are C ints).
//
// Sums are element-wise in the engine's order, which is fixed for a given
// engine, member count, element count and placement of the processes, but
// is not runtime/collective's member order (see its package doc).
type Group interface {
	// Rank is this member's index; Size the number of members.
	Rank() int
	Size() int
	// AllReduceSum replaces x with the element-wise sum over the members.
	AllReduceSum(x *tensor.Dense) error
	// AllGather fills buf (Size()·k elements) in place: chunk Rank()
	// (elements [Rank()·k, (Rank()+1)·k)) is this member's on entry, and
	// on return every chunk m holds member m's.
	AllGather(buf *tensor.Dense) error
	// ReduceScatterSum sets out (k elements) to chunk Rank() of the
	// element-wise sum over the members of in (Size()·k elements); in is
	// not changed.
	ReduceScatterSum(in, out *tensor.Dense) error
	// Broadcast copies member root's x into every member's x.
	Broadcast(x *tensor.Dense, root int) error
	// AllToAll sets chunk m of out to member m's chunk Rank() of in
	// (both Size()·k elements): the data movement of a reduce-scatter
	// without its sums, so that the caller can sum in an order of its own.
	AllToAll(in, out *tensor.Dense) error
}

// GroupMember checks the world ranks of a NewGroup call (distinct, each in
// [0, world), this rank among them) and returns this rank's member index.
// engine names the transport in the errors ("MPI", "NCCL").
func GroupMember(engine string, rank, world int, ranks []int) (int, error) {
	self := -1
	seen := make(map[int]bool, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= world || seen[r] {
			return -1, fmt.Errorf("transport: rank %d: %s group %v: rank %d is outside [0, %d) or repeated; want distinct world ranks", rank, engine, ranks, r, world)
		}
		seen[r] = true
		if r == rank {
			self = i
		}
	}
	if self < 0 {
		return -1, fmt.Errorf("transport: rank %d: %s group %v does not hold this rank; only members build a group", rank, engine, ranks)
	}
	return self, nil
}
