// Package mesh lays out a world of PP × DP ranks: DP replicas of one
// pipeline of PP ranks (pipeline × data parallel), and gives each rank two
// communicators over one world transport, one for its pipeline and one for
// its data-parallel group.
//
// # Layout
//
// The mesh has two dimensions ordered ["pp", "dp"] and is row-major, as
// torchtitan's ParallelDims builds its device mesh (its dimensions are
// ordered pp, dp_replicate, dp_shard, cp, tp, outermost first, and
// init_device_mesh numbers the ranks row-major). With pp the pipeline rank
// (the generated program's rank, 0..PP-1) and dp the replica index
// (0..DP-1):
//
//	world rank = pp·DP + dp
//
// So the DP ranks of one pipeline stage are adjacent (on one host when hosts
// hold consecutive ranks, where the gradient collectives are), and the ranks
// of one pipeline are DP apart. For PP = 4, DP = 2:
//
//	           dp 0  dp 1
//	pp 0  →      0     1     DP group 0: {0, 1}
//	pp 1  →      2     3     DP group 1: {2, 3}
//	pp 2  →      4     5     ...
//	pp 3  →      6     7
//	pipeline 0: {0, 2, 4, 6}; pipeline 1: {1, 3, 5, 7}
//
// Pipeline d (PipelineOf) is replica d; DP group p (DPGroupOf) holds the
// copies of pipeline rank p. Every replica runs the same generated program
// on its pipeline communicator; the collectives of runtime/collective run on
// the DP group's.
//
// # Communicators
//
// [Mesh.Groups] gives a rank its two communicators as views of one world
// transport (in-process, TCP, or any other [transport.Transport]): a view
// numbers the group's members 0..n-1 and maps them to world ranks. One
// world transport serves both groups without mixing their messages because
// two distinct ranks share at most one group: the ranks of one pipeline
// share dp and differ in pp, those of one DP group share pp and differ in
// dp, so no pair of ranks is in both. FIFO order per
// (peer, channel) is the world transport's.
//
// Why views rather than one transport per group: one rendezvous (the
// world's MASTER_ADDR:MASTER_PORT, one token, one fingerprint check), which
// works across hosts where a group's rank 0 is not on the master's host, and
// one failure domain: a rank that aborts either view aborts the world, so
// every rank of every group learns of it and names the failed rank.
//
// A view passes on what the world transport offers beyond Send and Recv:
// its schedule fingerprint ([transport.Fingerprinter]) and batches
// ([transport.Batcher], members translated to world ranks); and through
// [View.Parent] and [View.Ranks], the world transport's native collectives
// ([transport.Collectives], the MPI and NCCL transports'), which runtime/collective
// then runs on a communicator of the group's world ranks.
package mesh

import (
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/transport"
)

// MaxRanks bounds PP × DP (a world larger than this is refused before
// anything is sized from it).
const MaxRanks = 1 << 16

// Mesh is a PP × DP rank layout: PP pipeline ranks, DP replicas.
type Mesh struct {
	PP, DP int
}

// New returns the mesh of pp pipeline ranks and dp replicas.
func New(pp, dp int) (Mesh, error) {
	if pp < 1 || dp < 1 {
		return Mesh{}, fmt.Errorf("mesh: %d pipeline ranks × %d replicas; want both at least 1", pp, dp)
	}
	if pp > MaxRanks/dp {
		return Mesh{}, fmt.Errorf("mesh: %d pipeline ranks × %d replicas is over %d ranks", pp, dp, MaxRanks)
	}
	return Mesh{PP: pp, DP: dp}, nil
}

// World is the number of ranks, PP·DP.
func (m Mesh) World() int { return m.PP * m.DP }

func (m Mesh) String() string { return fmt.Sprintf("pp %d × dp %d", m.PP, m.DP) }

// Rank is the world rank of pipeline rank pp of replica dp: pp·DP + dp.
func (m Mesh) Rank(pp, dp int) int { return pp*m.DP + dp }

// Coords returns rank's pipeline rank and replica index.
func (m Mesh) Coords(rank int) (pp, dp int) { return rank / m.DP, rank % m.DP }

// PipelineOf is the pipeline (replica) rank belongs to: its dp index.
func (m Mesh) PipelineOf(rank int) int { return rank % m.DP }

// DPGroupOf is the data-parallel group rank belongs to: its pp index.
func (m Mesh) DPGroupOf(rank int) int { return rank / m.DP }

// PipelineRanks returns the world ranks of pipeline d, in pipeline-rank order.
func (m Mesh) PipelineRanks(d int) []int {
	out := make([]int, m.PP)
	for p := range out {
		out[p] = m.Rank(p, d)
	}
	return out
}

// DPGroupRanks returns the world ranks of DP group p, in replica order.
func (m Mesh) DPGroupRanks(p int) []int {
	out := make([]int, m.DP)
	for d := range out {
		out[d] = m.Rank(p, d)
	}
	return out
}

// Check reports whether rank is a rank of the mesh.
func (m Mesh) Check(rank int) error {
	if m.PP < 1 || m.DP < 1 {
		return fmt.Errorf("mesh: uninitialized Mesh %dx%d; build it with New", m.PP, m.DP)
	}
	if rank < 0 || rank >= m.World() {
		return fmt.Errorf("mesh: rank %d outside [0, %d) of %v", rank, m.World(), m)
	}
	return nil
}

// Groups returns world rank's two communicators over world, the rank's
// endpoint of a transport of World() ranks: its pipeline (PP members; this
// rank is member pp) and its DP group (DP members; this rank is member dp).
// Errors of the views name world ranks, as the world transport does.
func (m Mesh) Groups(world transport.Transport) (pipeline, dp transport.Transport, err error) {
	if world == nil {
		return nil, nil, fmt.Errorf("mesh: nil world transport")
	}
	r := world.Rank()
	if err := m.Check(r); err != nil {
		return nil, nil, err
	}
	if world.World() != m.World() {
		return nil, nil, fmt.Errorf("mesh: the world transport has %d ranks, %v has %d", world.World(), m, m.World())
	}
	pp, d := m.Coords(r)
	return NewView(world, fmt.Sprintf("pipeline %d", d), m.PipelineRanks(d), pp),
		NewView(world, fmt.Sprintf("dp group %d", pp), m.DPGroupRanks(pp), d), nil
}

// fpView is a View of a world transport that checked a schedule
// fingerprint: it passes the fingerprint on (runtime/pipe compares it with
// the Spec), so the pipeline view of a TCP world is checked as the world is.
type fpView struct{ *View }

func (v fpView) Fingerprint() string { return v.world.(transport.Fingerprinter).Fingerprint() }

// batchView is a View of a world transport that batches (MPI, NCCL): it
// passes batches on, members translated to world ranks, so a batch through
// the view is still one group of the engine (transport.Batch on a view of a
// transport that does not batch takes its fallback).
type batchView struct{ *View }

func (v batchView) Batch(ops []transport.BatchOp) error { return v.batch(ops) }

// fpBatchView is both.
type fpBatchView struct{ *View }

func (v fpBatchView) Fingerprint() string                 { return fpView(v).Fingerprint() }
func (v fpBatchView) Batch(ops []transport.BatchOp) error { return v.batch(ops) }

func (v *View) batch(ops []transport.BatchOp) error {
	w := make([]transport.BatchOp, len(ops))
	for i, op := range ops {
		p, err := v.peer("batch with", op.Peer)
		if err != nil {
			return err
		}
		w[i] = op
		w[i].Peer = p
	}
	err := v.world.(transport.Batcher).Batch(w)
	for i := range ops {
		if !ops[i].Send {
			ops[i].Tag, ops[i].T = w[i].Tag, w[i].T
		}
	}
	return err
}

// View is a group of a world transport: members 0..len(Ranks)-1 are the
// world ranks Ranks. It implements [transport.Transport] (and
// NewView's result is a [transport.Fingerprinter] and a [transport.Batcher]
// when the world is).
type View struct {
	world transport.Transport
	name  string
	ranks []int
	self  int
}

// NewView returns member self of the group of world ranks ranks over world
// (ranks[self] must be world's rank). Callers build views with Groups, which
// checks the layout.
func NewView(world transport.Transport, name string, ranks []int, self int) transport.Transport {
	v := &View{world: world, name: name, ranks: ranks, self: self}
	_, fp := world.(transport.Fingerprinter)
	_, batch := world.(transport.Batcher)
	switch {
	case fp && batch:
		return fpBatchView{v}
	case fp:
		return fpView{v}
	case batch:
		return batchView{v}
	}
	return v
}

// Name is the group's name ("pipeline 1", "dp group 0").
func (v *View) Name() string { return v.name }

// Ranks returns the world ranks of the group's members.
func (v *View) Ranks() []int { return append([]int(nil), v.ranks...) }

// WorldRank returns the world rank of member i.
func (v *View) WorldRank(i int) int { return v.ranks[i] }

// Parent returns the world transport the view is a group of: with Ranks,
// what runtime/collective needs to run the group's collectives natively
// when the world transport provides them ([transport.Collectives], MPI, NCCL).
func (v *View) Parent() transport.Transport { return v.world }

func (v *View) Rank() int  { return v.self }
func (v *View) World() int { return len(v.ranks) }

func (v *View) peer(op string, peer int) (int, error) {
	if peer < 0 || peer >= len(v.ranks) {
		return 0, fmt.Errorf("mesh: %s: rank %d (world rank %d): %s peer %d outside [0, %d)", v.name, v.self, v.ranks[v.self], op, peer, len(v.ranks))
	}
	return v.ranks[peer], nil
}

func (v *View) Send(peer int, ch abi.Channel, tag transport.Tag, t *tensor.Dense) error {
	w, err := v.peer("send to", peer)
	if err != nil {
		return err
	}
	return v.world.Send(w, ch, tag, t)
}

func (v *View) Recv(peer int, ch abi.Channel) (transport.Tag, *tensor.Dense, error) {
	w, err := v.peer("recv from", peer)
	if err != nil {
		return transport.Tag{}, nil, err
	}
	return v.world.Recv(w, ch)
}

// Close does nothing: the world transport is closed by its owner, once,
// after every group is done.
func (v *View) Close() error { return nil }

// Abort aborts the world transport: every rank of every group fails.
func (v *View) Abort(cause error) { v.world.Abort(cause) }

var (
	_ transport.Transport     = (*View)(nil)
	_ transport.Fingerprinter = fpView{}
	_ transport.Batcher       = batchView{}
	_ transport.Fingerprinter = fpBatchView{}
	_ transport.Batcher       = fpBatchView{}
)
