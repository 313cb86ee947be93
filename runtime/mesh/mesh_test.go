package mesh_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/mesh"
	"github.com/ppgen/ppgen/runtime/transport"
)

func TestLayout(t *testing.T) {
	m, err := mesh.New(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		got, want string
	}{
		{fmt.Sprint(m.PipelineRanks(0)), "[0 2 4 6]"},
		{fmt.Sprint(m.PipelineRanks(1)), "[1 3 5 7]"},
		{fmt.Sprint(m.DPGroupRanks(0)), "[0 1]"},
		{fmt.Sprint(m.DPGroupRanks(3)), "[6 7]"},
		{fmt.Sprint(m.World()), "8"},
		{fmt.Sprint(m.Rank(2, 1)), "5"},
		{fmt.Sprint(m.PipelineOf(5), m.DPGroupOf(5)), "1 2"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
	for r := range m.World() {
		pp, dp := m.Coords(r)
		if m.Rank(pp, dp) != r || m.PipelineRanks(m.PipelineOf(r))[pp] != r || m.DPGroupRanks(m.DPGroupOf(r))[dp] != r {
			t.Errorf("rank %d: coords (%d, %d) do not map back", r, pp, dp)
		}
	}
	for _, bad := range [][2]int{{0, 1}, {1, 0}, {-1, 2}, {1 << 10, 1 << 10}} {
		if _, err := mesh.New(bad[0], bad[1]); err == nil {
			t.Errorf("New(%d, %d) succeeded", bad[0], bad[1])
		}
	}
	if err := m.Check(8); err == nil || !strings.Contains(err.Error(), "rank 8 outside [0, 8)") {
		t.Errorf("Check(8): %v", err)
	}
}

// TestGroupsDoNotMix: every rank sends its world rank to every member of its
// pipeline and of its DP group on the same channel; each receives exactly
// its groups' messages, FIFO.
func TestGroupsDoNotMix(t *testing.T) {
	m, _ := mesh.New(3, 2)
	world := transport.NewInProc(m.World())
	type pair struct{ pipe, dp transport.Transport }
	gs := make([]pair, m.World())
	for r := range gs {
		p, d, err := m.Groups(world[r])
		if err != nil {
			t.Fatal(err)
		}
		gs[r] = pair{p, d}
	}
	var wg sync.WaitGroup
	errs := make([]error, m.World())
	for r := range gs {
		wg.Go(func() {
			for _, g := range []transport.Transport{gs[r].pipe, gs[r].dp} {
				for p := range g.World() {
					if p != g.Rank() {
						if err := g.Send(p, abi.ActChannel, transport.Tag{Stage: int32(r)}, tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{float64(r)}))); err != nil {
							errs[r] = err
							return
						}
					}
				}
			}
			for gi, g := range []transport.Transport{gs[r].pipe, gs[r].dp} {
				ranks := m.PipelineRanks(m.PipelineOf(r))
				if gi == 1 {
					ranks = m.DPGroupRanks(m.DPGroupOf(r))
				}
				for p := range g.World() {
					if p == g.Rank() {
						continue
					}
					tag, _, err := g.Recv(p, abi.ActChannel)
					if err != nil {
						errs[r] = err
						return
					}
					if int(tag.Stage) != ranks[p] {
						errs[r] = fmt.Errorf("rank %d group %d member %d: got world rank %d's message, want %d's", r, gi, p, tag.Stage, ranks[p])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// Aborting a view aborts the world.
	gs[0].dp.Abort(errors.New("boom"))
	if _, _, err := gs[5].pipe.Recv(0, abi.GradChannel); err == nil || !strings.Contains(err.Error(), "rank 0 aborted: boom") {
		t.Errorf("after rank 0's abort: %v", err)
	}
	if _, _, err := m.Groups(transport.NewInProc(5)[0]); err == nil {
		t.Error("Groups accepted a world of 5 ranks for a 3×2 mesh")
	}
	if err := gs[1].pipe.Send(7, abi.ActChannel, transport.Tag{}, nil); err == nil || !strings.Contains(err.Error(), "peer 7 outside [0, 3)") {
		t.Errorf("send to member 7: %v", err)
	}
}

// batcher is an in-process world endpoint that batches (as MPI does),
// recording the world ranks of each batch.
type batcher struct {
	transport.Transport
	seen [][]int
}

func (b *batcher) Batch(ops []transport.BatchOp) error {
	var peers []int
	for _, op := range ops {
		peers = append(peers, op.Peer)
	}
	b.seen = append(b.seen, peers)
	return transport.Batch(b.Transport, ops)
}

// TestViewBatches: a view of a batching world is a Batcher that passes
// batches on with world ranks, and gives the receives back.
func TestViewBatches(t *testing.T) {
	m, _ := mesh.New(2, 2)
	world := transport.NewInProc(m.World())
	b1, b3 := &batcher{Transport: world[1]}, &batcher{Transport: world[3]}
	_, dp1, _ := m.Groups(world[1]) // dp group 0 = {0, 1}
	p1, _, _ := m.Groups(b1)        // pipeline 1 = {1, 3}
	p3, _, _ := m.Groups(b3)
	if _, ok := dp1.(transport.Batcher); ok {
		t.Error("a view of a world that does not batch claims to batch")
	}
	x := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{7}))
	errs := make(chan error, 2)
	go func() {
		errs <- p3.(transport.Batcher).Batch([]transport.BatchOp{{Peer: 0, Ch: abi.ActChannel, Send: true, Tag: transport.Tag{Stage: 3}, T: x}})
	}()
	ops := []transport.BatchOp{{Peer: 1, Ch: abi.ActChannel}}
	if err := p1.(transport.Batcher).Batch(ops); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if ops[0].Tag.Stage != 3 || ops[0].T.Float64s()[0] != 7 {
		t.Errorf("received %v %v", ops[0].Tag, ops[0].T)
	}
	if fmt.Sprint(b1.seen, b3.seen) != "[[3]] [[1]]" {
		t.Errorf("the world saw batches with peers %v and %v; want world ranks [[3]] and [[1]]", b1.seen, b3.seen)
	}
}

// TestViewParent: every kind of view (plain, fingerprinted, batching)
// gives its world transport and the group's world ranks, which
// runtime/collective needs for an engine's native collectives.
func TestViewParent(t *testing.T) {
	m, _ := mesh.New(2, 3)
	world := transport.NewInProc(m.World())
	type parented interface {
		Parent() transport.Transport
		Ranks() []int
	}
	for _, w := range []transport.Transport{world[4], &batcher{Transport: world[4]}} {
		pipe, dp, err := m.Groups(w)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			v     transport.Transport
			ranks []int
		}{{pipe, []int{1, 4}}, {dp, []int{3, 4, 5}}} {
			p, ok := c.v.(parented)
			if !ok {
				t.Fatalf("%T has no Parent and Ranks", c.v)
			}
			if p.Parent() != w {
				t.Errorf("%T: Parent() = %v, want the world transport", c.v, p.Parent())
			}
			if got := fmt.Sprint(p.Ranks()); got != fmt.Sprint(c.ranks) {
				t.Errorf("%T: Ranks() = %s, want %v", c.v, got, c.ranks)
			}
		}
	}
}
