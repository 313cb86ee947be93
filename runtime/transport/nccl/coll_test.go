//go:build linux && (amd64 || arm64)

package nccl

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/mesh"
	"github.com/ppgen/ppgen/runtime/transport"
)

// The native collectives (coll.go) against a sequential reference: every
// member's input is a function of (member, element), so each member
// computes every member's and sums them itself, in member order. The test
// double sums in rank order, so its results must equal the reference bit
// for bit; on a GPU (PPGEN_NCCL_GPU=1) NCCL's order is its own and the
// results are held to 1e-12 (float64) and 1e-5 (float32) of the sum of the
// magnitudes.

// collInput is member m's element k of input i.
func collInput(m, i, k int) float64 {
	return math.Sin(float64(m*7919+i*131+k)) * math.Pow(10, float64(k%5-2))
}

func collVec(dt tensor.Dtype, m, i, n int) *tensor.Dense {
	v := make([]float64, n)
	for k := range v {
		v[k] = collInput(m, i, k)
	}
	return denseOf(dt, v)
}

func denseOf(dt tensor.Dtype, v []float64) *tensor.Dense {
	if dt == tensor.Float32 {
		f := make([]float32, len(v))
		for k, x := range v {
			f[k] = float32(x)
		}
		return tensor.New(tensor.WithShape(len(f)), tensor.WithBacking(f))
	}
	return tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(slices.Clone(v)))
}

func f64s(x *tensor.Dense) []float64 {
	if x.Dtype() == tensor.Float32 {
		var v []float64
		for _, f := range x.Float32s() {
			v = append(v, float64(f))
		}
		return v
	}
	return slices.Clone(x.Float64s())
}

// refSum is the member-order sum of the members' inputs i (n elements), in
// dt's arithmetic, and the sum of their magnitudes.
func refSum(dt tensor.Dtype, members []int, i, n int) (sum, mag []float64) {
	sum, mag = make([]float64, n), make([]float64, n)
	for k := range n {
		if dt == tensor.Float32 {
			acc := float32(collInput(members[0], i, k))
			for _, m := range members[1:] {
				acc += float32(collInput(m, i, k))
			}
			sum[k] = float64(acc)
		} else {
			acc := collInput(members[0], i, k)
			for _, m := range members[1:] {
				acc += collInput(m, i, k)
			}
			sum[k] = acc
		}
		for _, m := range members {
			mag[k] += math.Abs(collInput(m, i, k))
		}
	}
	return sum, mag
}

// onGPU: real NCCL, whose sums are in its own order.
func onGPU() bool { return os.Getenv("PPGEN_NCCL_GPU") == "1" }

// near compares got with want: bit for bit against the test double, within
// the tolerance of a reassociated sum on a GPU (sums) or exactly (copies).
func near(what string, dt tensor.Dtype, got, want, mag []float64, sums bool) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s %v: %d elements, want %d", what, dt, len(got), len(want))
	}
	tol := 1e-12
	if dt == tensor.Float32 {
		tol = 1e-5
	}
	for k := range got {
		if got[k] == want[k] {
			continue
		}
		if !sums || !onGPU() {
			return fmt.Errorf("%s %v: element %d is %v, want %v bit for bit", what, dt, k, got[k], want[k])
		}
		scale := 1.0
		if mag != nil && mag[k] > 0 {
			scale = mag[k]
		}
		if e := math.Abs(got[k]-want[k]) / scale; e > tol {
			return fmt.Errorf("%s %v: element %d is %v, want %v (error %.3g of the magnitudes, over %g)", what, dt, k, got[k], want[k], e, tol)
		}
	}
	return nil
}

// groupChecks runs every collective of g (this world rank's member of the
// world ranks members) at every size and dtype and compares with the
// reference.
func groupChecks(g transport.Group, members []int) error {
	n, r := g.Size(), g.Rank()
	if n != len(members) || members[r] < 0 {
		return fmt.Errorf("group of %d, member %d; want %d members", n, r, len(members))
	}
	me := members[r]
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for i, k := range []int{1, 7, 1 << 14} { // elements per chunk; 1<<14 float64 over 2 members: more than a socket buffer
			L := n * k
			x := collVec(dt, me, i, L)
			if err := g.AllReduceSum(x); err != nil {
				return err
			}
			want, mag := refSum(dt, members, i, L)
			if err := near("AllReduceSum", dt, f64s(x), want, mag, true); err != nil {
				return err
			}
			out := denseOf(dt, make([]float64, k))
			in := collVec(dt, me, i, L)
			if err := g.ReduceScatterSum(in, out); err != nil {
				return err
			}
			if err := near("ReduceScatterSum", dt, f64s(out), want[r*k:(r+1)*k], mag[r*k:(r+1)*k], true); err != nil {
				return err
			}
			if err := near("ReduceScatterSum's input", dt, f64s(in), f64s(collVec(dt, me, i, L)), nil, false); err != nil {
				return err
			}
			buf := make([]float64, L)
			for m := range n {
				for j := range k {
					buf[m*k+j] = -1 // garbage in the others' chunks
				}
			}
			copy(buf[r*k:], f64s(collVec(dt, me, i, L))[r*k:(r+1)*k])
			gb := denseOf(dt, buf)
			if err := g.AllGather(gb); err != nil {
				return err
			}
			var wantG []float64
			for m := range n {
				wantG = append(wantG, f64s(collVec(dt, members[m], i, L))[m*k:(m+1)*k]...)
			}
			if err := near("AllGather", dt, f64s(gb), wantG, nil, false); err != nil {
				return err
			}
			for _, root := range []int{n - 1, 0} {
				b := collVec(dt, me, i, L)
				if err := g.Broadcast(b, root); err != nil {
					return err
				}
				if err := near(fmt.Sprintf("Broadcast from %d", root), dt, f64s(b), f64s(collVec(dt, members[root], i, L)), nil, false); err != nil {
					return err
				}
			}
			a2a := denseOf(dt, make([]float64, L))
			if err := g.AllToAll(collVec(dt, me, i, L), a2a); err != nil {
				return err
			}
			var wantA []float64
			for m := range n {
				wantA = append(wantA, f64s(collVec(dt, members[m], i, L))[r*k:(r+1)*k]...)
			}
			if err := near("AllToAll", dt, f64s(a2a), wantA, nil, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// commChecks runs runtime/collective on c (native: asserted), whose
// members are the world ranks members, at a length that is not a multiple
// of the members (padded chunks), in the default order and MemberOrder.
func commChecks(c *collective.Comm, members []int) error {
	if !c.Native() {
		return errors.New("collective.Comm over the NCCL transport: Native() = false, want true")
	}
	n, r := c.Size(), c.Rank()
	const L = 1003
	k := collective.ChunkLen(L, n)
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		want, mag := refSum(dt, members, 9, L)
		padWant := append(slices.Clone(want), make([]float64, n*k-L)...)
		padMag := append(slices.Clone(mag), make([]float64, n*k-L)...)
		x := collVec(dt, members[r], 9, L)
		if err := c.AllReduce(x); err != nil {
			return err
		}
		if err := near("collective AllReduce", dt, f64s(x), want, mag, true); err != nil {
			return err
		}
		rs, err := c.ReduceScatter(collVec(dt, members[r], 9, L))
		if err != nil {
			return err
		}
		if err := near("collective ReduceScatter", dt, f64s(rs), padWant[r*k:(r+1)*k], padMag[r*k:(r+1)*k], true); err != nil {
			return err
		}
		ag, err := c.AllGather(denseOf(dt, padWant[r*k:(r+1)*k]))
		if err != nil {
			return err
		}
		// Each member contributes its own chunk of the reference: the
		// gathered result is the reference (on a GPU, each member's chunk
		// is what this member computed, which is exact).
		if err := near("collective AllGather", dt, f64s(ag), padWant, nil, false); err != nil {
			return err
		}
		b := collVec(dt, members[r], 9, L)
		if err := c.Broadcast(b, n-1); err != nil {
			return err
		}
		if err := near("collective Broadcast", dt, f64s(b), f64s(collVec(dt, members[n-1], 9, L)), nil, false); err != nil {
			return err
		}
	}
	return nil
}

// collScenario is a rank of TestCollectives' worlds (run by child).
func collScenario(tr *Transport, sc string, rank, n int) error {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	switch sc {
	case "coll", "gpu-coll":
		g, err := tr.NewGroup(all)
		if err != nil {
			return err
		}
		if err := groupChecks(g, all); err != nil {
			return err
		}
		// A subset of the world, in another order than the world's:
		// members n-1 and 0 (for n = 2, the world reversed); rank 1 of a
		// larger world is not a member and goes on.
		sub := []int{n - 1, 0}
		if self := slices.Index(sub, rank); self >= 0 {
			sg, err := tr.NewGroup(sub)
			if err != nil {
				return err
			}
			if sg.Rank() != self {
				return fmt.Errorf("group %v: member %d, want %d", sub, sg.Rank(), self)
			}
			if err := groupChecks(sg, sub); err != nil {
				return err
			}
			v := mesh.NewView(tr, "sub", sub, self)
			for _, opts := range [][]collective.Option{nil, {collective.MemberOrder()}} {
				c, err := collective.New(v, abi.ActChannel, opts...)
				if err != nil {
					return err
				}
				if err := commChecks(c, sub); err != nil {
					return err
				}
			}
		}
		// The world through runtime/collective, native and MemberOrder,
		// then its Send/Recv algorithms over the same transport, after
		// the collectives (point-to-point and collectives coexist).
		for _, opts := range [][]collective.Option{nil, {collective.MemberOrder()}} {
			c, err := collective.New(tr, abi.ActChannel, opts...)
			if err != nil {
				return err
			}
			if err := commChecks(c, all); err != nil {
				return err
			}
		}
		c, err := collective.New(tr, abi.ActChannel, collective.SendRecv())
		if err != nil {
			return err
		}
		x := collVec(tensor.Float64, rank, 3, 100)
		if err := c.AllReduce(x); err != nil {
			return err
		}
		want, _ := refSum(tensor.Float64, all, 3, 100)
		return near("Send/Recv AllReduce", tensor.Float64, f64s(x), want, nil, false)
	case "coll-abort":
		c, err := collective.New(tr, abi.ActChannel)
		if err != nil {
			return err
		}
		if err := c.AllReduce(collVec(tensor.Float64, rank, 0, 10)); err != nil {
			return err
		}
		if rank == 2 {
			time.Sleep(200 * time.Millisecond) // the others wait in the all-reduce's header exchange
			cause := errors.New("test: rank 2 gives up")
			tr.Abort(cause)
			return cause
		}
		return c.AllReduce(collVec(tensor.Float64, rank, 1, 1000))
	case "coll-asyncerr":
		g, err := tr.NewGroup(all)
		if err != nil {
			return err
		}
		for i := range 3 { // the group fails at its second collective (NCCLSTUB_FAIL_GROUP=1)
			if err := g.AllReduceSum(collVec(tensor.Float32, rank, i, 100)); err != nil {
				return err
			}
		}
		return errors.New("three all-reduces succeeded on a failing group")
	case "coll-timeout":
		g, err := tr.NewGroup(all)
		if err != nil {
			return err
		}
		if rank == 1 {
			time.Sleep(2500 * time.Millisecond) // never joins the all-reduce
			return nil
		}
		return g.AllReduceSum(collVec(tensor.Float64, rank, 0, 10))
	case "coll-join-timeout":
		if rank == 1 {
			time.Sleep(2500 * time.Millisecond) // never builds the group
			return nil
		}
		_, err := tr.NewGroup(all)
		return err
	case "coll-mismatch":
		members := all
		if rank == 1 {
			members = []int{0, 1} // the others build [0 1 2]
		}
		_, err := tr.NewGroup(members)
		return err
	}
	return fmt.Errorf("unknown scenario %q", sc)
}

// TestCollectives: every collective at 2 to 4 members against the
// reference, float32 and float64, on the world, on a subset of it in
// another order, and through runtime/collective (native, padded).
func TestCollectives(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			for r, out := range world(t, n, "coll") {
				if res := result(out); res != "OK" {
					t.Errorf("rank %d: %s\n%s", r, res, out)
				}
			}
		})
	}
}

// TestCollectiveFailures: a member that aborts, one whose communicator
// fails, one that never joins a collective or its group, and members that
// build different groups: each member fails, naming the rank at the origin
// where there is one.
func TestCollectiveFailures(t *testing.T) {
	for _, c := range []struct {
		scenario string
		n        int
		env      []string
		want     []string // per rank, a substring of its error ("" : OK)
	}{
		{"coll-abort", 3, nil, []string{
			// (the others wait in the header exchange before the all-reduce)
			"rank 2 aborted: test: rank 2 gives up",
			"rank 2 aborted: test: rank 2 gives up",
			"test: rank 2 gives up"}},
		{"coll-asyncerr", 3, []string{"NCCLSTUB_FAIL_RANK=1", "NCCLSTUB_FAIL_GROUP=1"}, []string{
			"ncclAllReduce (member 0 of world ranks [0 1 2]): rank 1 aborted: NCCL asynchronous error on device 0 (group of world ranks [0 1 2]): ncclCommGetAsyncError: unhandled system error",
			"transport: rank 1: ncclAllReduce (member 1 of world ranks [0 1 2]): NCCL asynchronous error on device 0 (group of world ranks [0 1 2]): ncclCommGetAsyncError: unhandled system error",
			"ncclAllReduce (member 2 of world ranks [0 1 2]): rank 1 aborted: NCCL asynchronous error on device 0 (group of world ranks [0 1 2])"}},
		{"coll-timeout", 2, nil, []string{
			"transport: rank 0: ncclAllReduce (member 0 of world ranks [0 1]): timed out: no progress for 1s (PPGEN_TIMEOUT): a member of world ranks [0 1] has not started this collective",
			""}},
		{"coll-join-timeout", 2, nil, []string{
			"transport: rank 0: NCCL group [0 1]: timed out: ncclCommInitRank did not return within 1s (PPGEN_TIMEOUT): a member did not join the group's communicator",
			""}},
		{"coll-mismatch", 3, nil, []string{
			// (rank 2 may still be in Dial when rank 1 fails)
			"rank 1 aborted: transport: rank 1: NCCL group [0 1]: protocol error",
			"transport: rank 1: NCCL group [0 1]: protocol error: world rank 0 builds the group [0 1 2] where this rank builds [0 1]: members must build the same groups in the same order",
			"rank 1 aborted: transport: rank 1: NCCL group [0 1]: protocol error"}},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			start := time.Now()
			outs := world(t, c.n, c.scenario, c.env...)
			if d := time.Since(start); d > 40*time.Second {
				t.Errorf("took %v: the failure was not detected within a bounded time", d)
			}
			for r, out := range outs {
				res := result(out)
				if c.want[r] == "" {
					if res != "OK" {
						t.Errorf("rank %d: %s, want OK\n%s", r, res, out)
					}
					continue
				}
				if !strings.HasPrefix(res, "ERR: ") || !strings.Contains(res, c.want[r]) {
					t.Errorf("rank %d: %s\nwant an error saying %q\n%s", r, res, c.want[r], out)
				}
			}
		})
	}
}

// TestSelfCollectives: a world of one, a group of one: every collective
// runs on NCCL (the test double logs it), and bad arguments are refused
// without failing the transport.
func TestSelfCollectives(t *testing.T) {
	log := filepath.Join(t.TempDir(), "groups")
	t.Setenv("NCCLSTUB_LOG", log)
	tr := dialSelf(t, Config{})
	for _, bad := range []struct {
		ranks []int
		want  string
	}{
		{[]int{1}, "NCCL group [1]: rank 1 is outside [0, 1) or repeated"},
		{[]int{0, 0}, "NCCL group [0 0]: rank 0 is outside [0, 1) or repeated"},
		{[]int{}, "NCCL group [] does not hold this rank"},
	} {
		if _, err := tr.NewGroup(bad.ranks); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("NewGroup(%v): %v, want %q", bad.ranks, err, bad.want)
		}
	}
	g, err := tr.NewGroup([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	if err := groupChecks(g, []int{0}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"allreduce", "reducescatter", "allgather", "broadcast"} {
		if !strings.Contains(string(b), " "+name) {
			t.Errorf("no %s in the groups the test double ran:\n%s", name, b)
		}
	}
	x := collVec(tensor.Float64, 0, 0, 6)
	for _, c := range []struct {
		name string
		run  func() error
		want string
	}{
		{"view", func() error { v, _ := x.Slice(tensor.S(1, 3)); return g.AllReduceSum(v.(*tensor.Dense)) }, "is a view"},
		{"dtype", func() error { return g.AllReduceSum(tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{1, 2}))) }, "dtype int; want float32 or float64"},
		{"mixed dtypes", func() error { return g.ReduceScatterSum(x, collVec(tensor.Float32, 0, 0, 6)) }, "want one dtype"},
		{"sizes", func() error { return g.ReduceScatterSum(x, collVec(tensor.Float64, 0, 0, 5)) }, "want 1 times the output's elements"},
		{"root", func() error { return g.Broadcast(x, 1) }, "root 1 outside [0, 1)"},
		{"nil", func() error { return g.AllGather(nil) }, "nil tensor"},
	} {
		if err := c.run(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if err := g.AllReduceSum(x); err != nil {
		t.Errorf("after refused arguments: %v", err)
	}
	if err := tr.Send(0, abi.ActChannel, transport.Tag{}, samples[0].make(0, 0)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.Recv(0, abi.ActChannel); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.AllReduceSum(x); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
