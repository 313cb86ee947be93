package collective_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/mesh"
	"github.com/ppgen/ppgen/runtime/transport"
)

// fakeEngine is a world transport with native collectives
// (transport.Collectives), as MPI's are, in one process: each collective
// waits until every member of its group deposited its buffer, then every
// member computes its result from all of them. It sums in reverse member
// order, so that a result that comes through it is told apart from the
// Send/Recv algorithms' member order.
type fakeEngine struct {
	transport.Transport
	shared *fakeShared
	groups *[]string // NewGroup calls, "world rank: ranks"
	mu     *sync.Mutex
	fail   error // returned by every collective when set
}

type fakeShared struct {
	mu    sync.Mutex
	cond  *sync.Cond
	bufs  map[string]map[int][]float64 // group key → member → buffer
	gen   map[string]int
	count map[string]int
}

func fakeWorld(n int) []transport.Transport {
	trs := transport.NewInProc(n, transport.InProcTimeout(10*time.Second))
	sh := &fakeShared{bufs: map[string]map[int][]float64{}, gen: map[string]int{}, count: map[string]int{}}
	sh.cond = sync.NewCond(&sh.mu)
	var groups []string
	var mu sync.Mutex
	out := make([]transport.Transport, n)
	for r, tr := range trs {
		out[r] = &fakeEngine{Transport: tr, shared: sh, groups: &groups, mu: &mu}
	}
	return out
}

func (e *fakeEngine) NewGroup(ranks []int) (transport.Group, error) {
	self := slices.Index(ranks, e.Rank())
	if self < 0 {
		return nil, fmt.Errorf("rank %d not in %v", e.Rank(), ranks)
	}
	e.mu.Lock()
	*e.groups = append(*e.groups, fmt.Sprintf("%d: %v", e.Rank(), ranks))
	e.mu.Unlock()
	return &fakeGroup{e: e, key: fmt.Sprint(ranks), rank: self, size: len(ranks)}, nil
}

type fakeGroup struct {
	e          *fakeEngine
	key        string
	rank, size int
}

func (g *fakeGroup) Rank() int { return g.rank }
func (g *fakeGroup) Size() int { return g.size }

// exchange deposits mine and returns every member's (after all deposited;
// the next exchange waits until every member has read this one's).
func (g *fakeGroup) exchange(mine []float64) [][]float64 {
	sh := g.e.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	gen := sh.gen[g.key]
	if sh.bufs[g.key] == nil {
		sh.bufs[g.key] = map[int][]float64{}
	}
	sh.bufs[g.key][g.rank] = append([]float64(nil), mine...)
	sh.count[g.key]++
	if sh.count[g.key] == g.size {
		sh.cond.Broadcast()
	}
	for sh.count[g.key] < g.size && sh.gen[g.key] == gen {
		sh.cond.Wait()
	}
	all := make([][]float64, g.size)
	for m := range all {
		all[m] = sh.bufs[g.key][m]
	}
	// The last reader starts the next generation.
	sh.count[g.key]++
	if sh.count[g.key] == 2*g.size {
		sh.count[g.key] = 0
		sh.gen[g.key]++
		sh.bufs[g.key] = map[int][]float64{}
		sh.cond.Broadcast()
	} else {
		for sh.gen[g.key] == gen {
			sh.cond.Wait()
		}
	}
	return all
}

func reverseSum(all [][]float64, i int) float64 {
	v := all[len(all)-1][i]
	for m := len(all) - 2; m >= 0; m-- {
		v += all[m][i]
	}
	return v
}

func (g *fakeGroup) AllReduceSum(x *tensor.Dense) error {
	if g.e.fail != nil {
		return g.e.fail
	}
	v := x.Float64s()
	all := g.exchange(v)
	for i := range v {
		v[i] = reverseSum(all, i)
	}
	return nil
}

func (g *fakeGroup) AllGather(buf *tensor.Dense) error {
	v := buf.Float64s()
	k := len(v) / g.size
	all := g.exchange(v)
	for m := range g.size {
		copy(v[m*k:(m+1)*k], all[m][m*k:(m+1)*k])
	}
	return nil
}

func (g *fakeGroup) ReduceScatterSum(in, out *tensor.Dense) error {
	v, o := in.Float64s(), out.Float64s()
	all := g.exchange(v)
	for i := range o {
		o[i] = reverseSum(all, g.rank*len(o)+i)
	}
	return nil
}

func (g *fakeGroup) AllToAll(in, out *tensor.Dense) error {
	v, o := in.Float64s(), out.Float64s()
	k := len(v) / g.size
	all := g.exchange(v)
	for m := range g.size {
		copy(o[m*k:(m+1)*k], all[m][g.rank*k:(g.rank+1)*k])
	}
	return nil
}

func (g *fakeGroup) Broadcast(x *tensor.Dense, root int) error {
	v := x.Float64s()
	all := g.exchange(v)
	copy(v, all[root])
	return nil
}

// reverseRef is the fake engine's order: members summed last to first.
func reverseRef(xs [][]float64, L int) []float64 {
	out := make([]float64, L)
	for i := range L {
		out[i] = reverseSum(xs, i)
	}
	return out
}

// TestNativeCollectives: a Comm on a transport with native collectives, or
// on a runtime/mesh view of one, runs them (its results are the engine's
// order, not the member order), with the package's padding and chunks;
// SendRecv keeps the Send/Recv algorithms (member order), and MemberOrder
// the engine's data movement with member-order sums.
func TestNativeCollectives(t *testing.T) {
	const n, L = 3, 10 // 10 over 3 members: chunks of 4, padded to 12
	xs := inputs(n, L, 11)
	k := collective.ChunkLen(L, n)
	if slices.Equal(refSum(xs, L), reverseRef(xs, L)) {
		t.Fatal("the test's inputs sum to the same bits in both orders: they cannot tell the paths apart")
	}
	for _, c := range []struct {
		name    string
		view    bool
		opts    []collective.Option
		native  bool
		ordered bool // member-order sums
	}{
		{"world", false, nil, true, false},
		{"view", true, nil, true, false},
		{"world/sendrecv", false, []collective.Option{collective.SendRecv()}, false, true},
		{"view/sendrecv", true, []collective.Option{collective.SendRecv()}, false, true},
		{"world/member-order", false, []collective.Option{collective.MemberOrder()}, true, true},
		{"view/member-order", true, []collective.Option{collective.MemberOrder()}, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			world := fakeWorld(n)
			trs := world
			if c.view {
				// A 1 × 3 mesh: the DP group is the whole world, as a view.
				m, _ := mesh.New(1, n)
				trs = make([]transport.Transport, n)
				for r := range n {
					_, dp, err := m.Groups(world[r])
					if err != nil {
						t.Fatal(err)
					}
					trs[r] = dp
				}
			}
			want := refSum(xs, L)
			if !c.ordered {
				want = reverseRef(xs, L)
			}
			padWant := append(append([]float64(nil), want...), make([]float64, n*k-L)...)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				comm, err := collective.New(trs[r], abi.ActChannel, c.opts...)
				if err != nil {
					t.Fatal(err)
				}
				if comm.Native() != c.native {
					t.Fatalf("Native() = %v, want %v", comm.Native(), c.native)
				}
				wg.Go(func() { errs[r] = nativeChecks(comm, xs[r], want, padWant, xs[n-1], k) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			groups := *world[0].(*fakeEngine).groups
			if c.native && len(groups) != n {
				t.Errorf("NewGroup calls %v; want one per member (built once, on the first collective)", groups)
			}
			if !c.native && len(groups) != 0 {
				t.Errorf("NewGroup calls %v with SendRecv; want none", groups)
			}
		})
	}
}

// nativeChecks runs every collective on member c.Rank() and compares.
func nativeChecks(c *collective.Comm, x, want, padWant, rootX []float64, k int) error {
	r, n := c.Rank(), c.Size()
	ar := vec64(x)
	if err := c.AllReduce(ar); err != nil {
		return err
	}
	if !slices.Equal(ar.Float64s(), want) {
		return fmt.Errorf("member %d: all-reduce %v, want %v", r, ar.Float64s(), want)
	}
	rs, err := c.ReduceScatter(vec64(x))
	if err != nil {
		return err
	}
	if !slices.Equal(rs.Float64s(), padWant[r*k:(r+1)*k]) {
		return fmt.Errorf("member %d: reduce-scatter %v, want %v", r, rs.Float64s(), padWant[r*k:(r+1)*k])
	}
	buf := make([]float64, n*k)
	copy(buf, x)
	bt := vec64(buf)
	if err := c.ReduceScatterInto(bt); err != nil {
		return err
	}
	for m := range n {
		got, w := bt.Float64s()[m*k:(m+1)*k], buf[m*k:(m+1)*k]
		if m == r {
			w = padWant[r*k : (r+1)*k]
		}
		if !slices.Equal(got, w) {
			return fmt.Errorf("member %d: reduce-scatter into: chunk %d = %v, want %v", r, m, got, w)
		}
	}
	ag, err := c.AllGather(vec64(padWant[r*k : (r+1)*k]))
	if err != nil {
		return err
	}
	if !slices.Equal(ag.Float64s(), padWant) {
		return fmt.Errorf("member %d: all-gather %v, want %v", r, ag.Float64s(), padWant)
	}
	gb := make([]float64, n*k)
	copy(gb[r*k:], padWant[r*k:(r+1)*k])
	gt := vec64(gb)
	if err := c.AllGatherInto(gt); err != nil {
		return err
	}
	if !slices.Equal(gt.Float64s(), padWant) {
		return fmt.Errorf("member %d: all-gather into %v, want %v", r, gt.Float64s(), padWant)
	}
	bc := vec64(x)
	if err := c.Broadcast(bc, n-1); err != nil {
		return err
	}
	if !slices.Equal(bc.Float64s(), rootX) {
		return fmt.Errorf("member %d: broadcast %v, want %v", r, bc.Float64s(), rootX)
	}
	return nil
}

// TestNativeError: an engine's failure is a *collective.Error naming the
// collective and the member, wrapping the engine's error.
func TestNativeError(t *testing.T) {
	world := fakeWorld(2)
	cause := errors.New("engine: rank 1 aborted")
	for _, tr := range world {
		tr.(*fakeEngine).fail = cause
	}
	// Both members run it: the header exchange before it meets them.
	errs := run(world, func(c *collective.Comm) error { return c.AllReduce(vec64([]float64{1, 2, 3})) })
	err := errs[0]
	var ce *collective.Error
	if !errors.As(err, &ce) || ce.Op != "all-reduce" || ce.Rank != 0 || !errors.Is(err, cause) {
		t.Fatalf("%v; want a collective.Error of all-reduce, member 0, wrapping %q", err, cause)
	}
	if want := "collective: all-reduce (member 0 of 2): engine: rank 1 aborted"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}
