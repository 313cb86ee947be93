//go:build mpi

package collective_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/mesh"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/transport/mpi"
	"github.com/ppgen/ppgen/runtime/transport/mpi/mpitest"
)

// The MPI tests re-run this test binary under mpirun (MPI starts once per
// process): TestMPICollectives starts `mpirun -np 4 <test binary>
// -test.run ^TestMPICollectivesChild$` twice and compares what the ranks
// print. BenchmarkAllReduce16MiBMPI runs under mpirun directly (see its doc).

const childVar = "PPGEN_COLLECTIVE_MPI_CHILD"

// mpiWorld is this process's MPI transport, started on first use and
// closed by TestMain.
var mpiWorld struct {
	once sync.Once
	t    transport.Transport
	err  error
}

func world(tb testing.TB) transport.Transport {
	tb.Helper()
	mpiWorld.once.Do(func() {
		mpiWorld.t, mpiWorld.err = mpi.New(mpi.Config{Timeout: time.Minute, Fingerprint: "collective-mpi-test", Logger: slog.New(slog.DiscardHandler)})
	})
	if mpiWorld.err != nil {
		tb.Fatal(mpiWorld.err)
	}
	return mpiWorld.t
}

func TestMain(m *testing.M) {
	code := m.Run()
	if mpiWorld.t != nil {
		if err := mpiWorld.t.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "collective test: closing MPI:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	sumLine  = regexp.MustCompile(`(?m)^rank (\d+) native sha256 ([0-9a-f]{64}) all-reduce ([0-9a-f]{64})$`)
	diffLine = regexp.MustCompile(`(?m)^rank (\d+) native max error float64 (\S+) float32 (\S+)$`)
)

// TestMPICollectives: over the MPI transport (4 ranks), the native
// collectives equal the member-order reference within float64 1e-12 and
// float32 1e-5 (relative to the sum of the magnitudes, the bound of a
// reassociated sum), the Send/Recv algorithms and MemberOrder (MPI's
// all-to-all and all-gather, member-order sums) equal it bit for bit, every
// member gets the same bits, and two jobs give the same bits (the
// native order is fixed run to run).
func TestMPICollectives(t *testing.T) {
	if testing.Short() {
		t.Skip("starts mpirun jobs")
	}
	var sums, reduced [2]map[string]string
	for job := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		argv := mpitest.Args(t, 4, os.Args[0], "-test.run=^TestMPICollectivesChild$", "-test.v")
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), childVar+"=1")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("job %d: %s: %v\n%s", job, strings.Join(argv, " "), err, out)
		}
		sums[job], reduced[job] = map[string]string{}, map[string]string{}
		for _, m := range sumLine.FindAllStringSubmatch(string(out), -1) {
			sums[job][m[1]], reduced[job][m[1]] = m[2], m[3]
		}
		if len(sums[job]) != 4 {
			t.Fatalf("job %d: %d ranks printed their sums, want 4:\n%s", job, len(sums[job]), out)
		}
		for _, m := range diffLine.FindAllStringSubmatch(string(out), -1) {
			t.Logf("job %d rank %s: native vs member order: float64 %s, float32 %s", job, m[1], m[2], m[3])
		}
	}
	for r, s := range sums[0] {
		if reduced[0][r] != reduced[0]["0"] {
			t.Errorf("job 0: rank %s's native all-reduce results differ from rank 0's", r)
		}
		if s != sums[1][r] {
			t.Errorf("rank %s: the native results of the two jobs differ (%s, %s): not reproducible run to run", r, s, sums[1][r])
		}
	}
}

// TestMPICollectiveAbort: a rank that aborts while the others wait in a
// native all-reduce makes each of them fail, naming it and its cause.
func TestMPICollectiveAbort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an mpirun job")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := mpitest.Args(t, 4, os.Args[0], "-test.run=^TestMPICollectivesChild$", "-test.v")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), childVar+"=abort")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the job of an aborting rank succeeded:\n%s", out)
	}
	for r := range 3 {
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(fmt.Sprintf(`rank %d: native all-reduce failed: rank 3 aborted: test: rank 3 gives up`, r)),
			regexp.MustCompile(fmt.Sprintf(`rank %d: all-reduce failed: collective: all-reduce \(member %d of 4\).*: rank 3 aborted: test: rank 3 gives up`, r, r)),
		} {
			if !want.Match(out) {
				t.Errorf("no %q in the output:\n%s", want, out)
			}
		}
	}
}

// childAbort: rank 3 aborts; the others are in a native all-reduce (of a
// group of their own: a Comm's waits first in the header exchange), then
// run a Comm's all-reduce on the failed transport.
func childAbort(t *testing.T) {
	w, err := mpi.New(mpi.Config{Timeout: time.Minute, Fingerprint: "collective-abort", AbortLinger: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := collective.New(w, abi.ActChannel)
	if err != nil {
		t.Fatal(err)
	}
	g, err := w.(transport.Collectives).NewGroup([]int{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if w.Rank() == 3 {
		time.Sleep(200 * time.Millisecond) // the others are waiting in the all-reduce
		w.Abort(errors.New("test: rank 3 gives up"))
		t.Fatal("Abort returned")
	}
	err = g.AllReduceSum(vec64(make([]float64, 1000)))
	fmt.Printf("rank %d: native all-reduce failed: %v\n", w.Rank(), err)
	err = c.AllReduce(vec64(make([]float64, 1000)))
	fmt.Printf("rank %d: all-reduce failed: %v\n", w.Rank(), err)
	os.Stdout.Sync()
	select {} // rank 3's MPI_Abort ends the job
}

// TestMPICollectiveMismatch: under mpirun, members that disagree on a
// native collective's element count, dtype or mode fail with a
// MismatchError on every rank before the engine is called (MPI would
// otherwise truncate, or sum the wrong bytes).
func TestMPICollectiveMismatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an mpirun job")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := mpitest.Args(t, 4, os.Args[0], "-test.run=^TestMPICollectivesChild$", "-test.v")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), childVar+"=mismatch")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	for r := range 4 {
		for _, want := range []string{
			fmt.Sprintf("rank %d: count: all-reduce #1: member ", r),
			fmt.Sprintf("rank %d: dtype: all-reduce #2: member ", r),
			fmt.Sprintf("rank %d: mode: all-reduce #1: member ", r),
		} {
			if !strings.Contains(string(out), want) {
				t.Errorf("no %q in the output:\n%s", want, out)
			}
		}
	}
}

// TestMPIGroupTruncate: below runtime/collective's header check, an MPI
// group all-reduce of 7 elements where the others sum 8 is MPI's
// MPI_ERR_TRUNCATE on the short rank: returned (MPI_ERRORS_RETURN, also on
// MPI_COMM_WORLD, where Open MPI reports it) as an *mpi.Error with a hint,
// not MPI_ERRORS_ARE_FATAL's end of the job.
func TestMPIGroupTruncate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an mpirun job")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := mpitest.Args(t, 4, os.Args[0], "-test.run=^TestMPICollectivesChild$", "-test.v")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), childVar+"=truncate")
	out, _ := cmd.CombinedOutput()
	want := "rank 3: mpi.Error class MPI_ERR_TRUNCATE: transport: rank 3: MPI_Iallreduce (member 3 of world ranks [0 1 2 3]): protocol error: MPI_Test (MPI_Iallreduce): MPI_ERR_TRUNCATE: message truncated"
	if !strings.Contains(string(out), want) || strings.Contains(string(out), "MPI_ERRORS_ARE_FATAL") {
		t.Fatalf("want %q and no MPI_ERRORS_ARE_FATAL in the output:\n%s", want, out)
	}
}

// childTruncate: rank 3 all-reduces 7 elements on an MPI group, the others 8.
func childTruncate(t *testing.T) {
	w := world(t)
	g, err := w.(transport.Collectives).NewGroup([]int{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	n := 8
	if w.Rank() == 3 {
		n = 7
	}
	err = g.AllReduceSum(vec64(make([]float64, n)))
	var me *mpi.Error
	if errors.As(err, &me) && strings.Contains(me.Hint, "disagree") {
		fmt.Printf("rank %d: mpi.Error class MPI_ERR_TRUNCATE: %v\n", w.Rank(), err)
	} else {
		fmt.Printf("rank %d: %v\n", w.Rank(), err)
	}
	os.Stdout.Sync()
}

// childMismatch: rank 3 all-reduces 7 elements where the others do 8, then
// float32 where the others do float64, then (on a fresh Comm) runs
// member-order where the others run native; each rank prints the field
// and message of its MismatchError.
func childMismatch(t *testing.T) {
	w := world(t)
	r := w.Rank()
	c, err := collective.New(w, abi.ActChannel)
	if err != nil {
		t.Fatal(err)
	}
	odd := r == 3
	report := func(err error) {
		var me *collective.MismatchError
		if !errors.As(err, &me) {
			t.Fatalf("rank %d: %v; want a MismatchError", r, err)
		}
		fmt.Printf("rank %d: %s: %v\n", r, me.Field, me)
	}
	report(c.AllReduce(vec64(make([]float64, map[bool]int{true: 7, false: 8}[odd]))))
	x := vec64(make([]float64, 8))
	if odd {
		x = tensor.New(tensor.WithShape(8), tensor.WithBacking(make([]float32, 8)))
	}
	report(c.AllReduce(x))
	var opts []collective.Option
	if odd {
		opts = append(opts, collective.MemberOrder())
	}
	c2, err := collective.New(w, abi.GradChannel, opts...)
	if err != nil {
		t.Fatal(err)
	}
	report(c2.AllReduce(vec64(make([]float64, 8))))
	os.Stdout.Sync()
}

// TestMPICollectivesChild is one rank of TestMPICollectives's jobs (and
// of TestMPICollectiveAbort's and TestMPICollectiveMismatch's).
func TestMPICollectivesChild(t *testing.T) {
	switch os.Getenv(childVar) {
	case "":
		t.Skip("runs under mpirun, started by TestMPICollectives")
	case "abort":
		childAbort(t)
		return
	case "mismatch":
		childMismatch(t)
		return
	case "truncate":
		childTruncate(t)
		return
	}
	w := world(t)
	n, r := w.World(), w.Rank()
	native, err := collective.New(w, abi.ActChannel)
	if err != nil {
		t.Fatal(err)
	}
	sendrecv, err := collective.New(w, abi.ActChannel, collective.SendRecv())
	if err != nil {
		t.Fatal(err)
	}
	ordered, err := collective.New(w, abi.ActChannel, collective.MemberOrder())
	if err != nil {
		t.Fatal(err)
	}
	if !native.Native() || sendrecv.Native() || !ordered.Native() {
		t.Fatalf("Native(): %v, %v with SendRecv, %v with MemberOrder; want true, false, true", native.Native(), sendrecv.Native(), ordered.Native())
	}
	const L = 1003 // not a multiple of 4: padded chunks
	xs := inputs(n, L, 7)
	want := refSum(xs, L)
	mag := make([]float64, L) // Σ|x|, the scale of a reassociated sum's error
	for i := range mag {
		for m := range n {
			mag[i] += math.Abs(xs[m][i])
		}
	}
	k := collective.ChunkLen(L, n)
	h, hr := sha256.New(), sha256.New() // every native result; the all-reduces'
	record := func(name string, v []float64) {
		for _, x := range v {
			binary.Write(h, binary.LittleEndian, math.Float64bits(x))
			if strings.HasPrefix(name, "all-reduce") {
				binary.Write(hr, binary.LittleEndian, math.Float64bits(x))
			}
		}
	}
	worst64, worst32 := 0.0, 0.0
	mpiOrder := func(c *collective.Comm) bool { return c == native } // MPI's own sums
	check := func(name string, c *collective.Comm, got, want []float64, off int, exact bool, f32 bool) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d elements, want %d", name, len(got), len(want))
		}
		tol := 1e-12
		if f32 {
			tol = 1e-5
		}
		for i := range got {
			if exact && got[i] != want[i] {
				t.Fatalf("%s (native %v): element %d = %v, want %v bit for bit", name, c.Native(), i, got[i], want[i])
			}
			scale := 1.0
			if j := off + i; j < L && mag[j] > 0 {
				scale = mag[j]
			}
			e := math.Abs(got[i]-want[i]) / scale
			if e > tol {
				t.Fatalf("%s (native %v): element %d = %v, want %v (error %.3g of the magnitudes, over %g)", name, c.Native(), i, got[i], want[i], e, tol)
			}
			if mpiOrder(c) {
				if f32 {
					worst32 = math.Max(worst32, e)
				} else {
					worst64 = math.Max(worst64, e)
				}
			}
		}
		if mpiOrder(c) {
			record(name, got)
		}
	}
	padWant := append(append([]float64(nil), want...), make([]float64, n*k-L)...)
	for _, c := range []*collective.Comm{sendrecv, ordered, native} {
		exact := !mpiOrder(c) // the Send/Recv algorithms and MemberOrder: the member order, bit for bit
		// AllReduce, float64 and float32.
		x := vec64(xs[r])
		if err := c.AllReduce(x); err != nil {
			t.Fatal(err)
		}
		check("all-reduce", c, x.Float64s(), want, 0, exact, false)
		x32 := make([]float32, L)
		w32 := make([]float64, L)
		for i, v := range xs[r] {
			x32[i] = float32(v)
		}
		for i := range L {
			acc := float32(xs[0][i])
			for m := 1; m < n; m++ {
				acc += float32(xs[m][i])
			}
			w32[i] = float64(acc)
		}
		t32 := tensor.New(tensor.WithShape(L), tensor.WithBacking(x32))
		if err := c.AllReduce(t32); err != nil {
			t.Fatal(err)
		}
		g32 := make([]float64, L)
		for i, v := range t32.Float32s() {
			g32[i] = float64(v)
		}
		check("all-reduce float32", c, g32, w32, 0, exact, true)
		// ReduceScatter and ReduceScatterInto.
		rs, err := c.ReduceScatter(vec64(xs[r]))
		if err != nil {
			t.Fatal(err)
		}
		check("reduce-scatter", c, rs.Float64s(), padWant[r*k:(r+1)*k], r*k, exact, false)
		buf := make([]float64, n*k)
		copy(buf, xs[r])
		bt := vec64(buf)
		if err := c.ReduceScatterInto(bt); err != nil {
			t.Fatal(err)
		}
		check("reduce-scatter into", c, bt.Float64s()[r*k:(r+1)*k], padWant[r*k:(r+1)*k], r*k, exact, false)
		for m := range n { // the other chunks are left as they were
			if m != r && !equal(bt.Float64s()[m*k:(m+1)*k], buf[m*k:(m+1)*k]) {
				t.Fatalf("reduce-scatter into (native %v): chunk %d changed", c.Native(), m)
			}
		}
		// AllGather and AllGatherInto: the reduced chunks, gathered, are the sum.
		ag, err := c.AllGather(vec64(padWant[r*k : (r+1)*k]))
		if err != nil {
			t.Fatal(err)
		}
		check("all-gather", c, ag.Float64s(), padWant, 0, true, false)
		gb := make([]float64, n*k)
		copy(gb[r*k:], padWant[r*k:(r+1)*k])
		gt := vec64(gb)
		if err := c.AllGatherInto(gt); err != nil {
			t.Fatal(err)
		}
		check("all-gather into", c, gt.Float64s(), padWant, 0, true, false)
		// Broadcast from the last member.
		bc := vec64(xs[r])
		if err := c.Broadcast(bc, n-1); err != nil {
			t.Fatal(err)
		}
		check("broadcast", c, bc.Float64s(), xs[n-1], 0, true, false)
	}
	// Through a runtime/mesh view: the DP groups of a 2 × 2 mesh run on
	// their own MPI communicators (two members: a + b is commutative, so
	// the native sums equal the member order bit for bit).
	m, err := mesh.New(2, n/2)
	if err != nil {
		t.Fatal(err)
	}
	_, dpT, err := m.Groups(w)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := collective.New(dpT, abi.ActChannel)
	if err != nil {
		t.Fatal(err)
	}
	if !dc.Native() {
		t.Fatal("a mesh view of the MPI transport: Native() = false, want true")
	}
	pp, _ := m.Coords(r)
	members := m.DPGroupRanks(pp)
	group := make([][]float64, len(members))
	for i, wr := range members {
		group[i] = xs[wr]
	}
	x := vec64(xs[r])
	if err := dc.AllReduce(x); err != nil {
		t.Fatal(err)
	}
	if !equal(x.Float64s(), refSum(group, L)) {
		t.Fatalf("dp group %v: the native all-reduce differs from the member-order sum", members)
	}
	fmt.Printf("rank %d native sha256 %x all-reduce %x\n", r, h.Sum(nil), hr.Sum(nil))
	fmt.Printf("rank %d native max error float64 %.3g float32 %.3g\n", r, worst64, worst32)
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// BenchmarkAllReduce16MiBMPI all-reduces 16 MiB of float32 over the MPI
// transport's ranks (4: one process each, under mpirun, shared memory on
// one host): MPI's own all-reduce (native), MPI's all-to-all and
// all-gather with member-order sums (member-order), and runtime/collective's
// algorithms over the transport's Send and Recv (sendrecv), the figures to
// set beside BenchmarkAllReduce16MiB's in-process, TCP and raw TCP ring.
// Every rank must run the same iterations, so b.N must be fixed: run it
// with -test.benchtime Nx (a count), and read rank 0's lines (OpenMPI's
// --output-filename writes them to bench/1/rank.0/stdout):
//
//	go test -c -tags mpi -o collective.test ./runtime/collective/
//	mpirun -np 4 --output-filename bench ./collective.test -test.run '^$' -test.bench AllReduce16MiBMPI -test.benchtime 5x
func BenchmarkAllReduce16MiBMPI(b *testing.B) {
	if bt := flag.Lookup("test.benchtime"); bt == nil || !strings.HasSuffix(bt.Value.String(), "x") {
		b.Skip("run with -test.benchtime Nx: every MPI rank must run the same number of iterations")
	}
	w := world(b)
	if w.World() != 4 {
		b.Skipf("MPI world of %d ranks; run under mpirun -np 4", w.World())
	}
	const elems = 16 << 20 / 4
	for _, name := range []string{"native", "member-order", "sendrecv"} {
		b.Run(name, func(b *testing.B) {
			opts := map[string][]collective.Option{"member-order": {collective.MemberOrder()}, "sendrecv": {collective.SendRecv()}}[name]
			c, err := collective.New(w, abi.ActChannel, opts...)
			if err != nil {
				b.Fatal(err)
			}
			v := make([]float32, elems)
			for i := range v {
				v[i] = float32(w.Rank())
			}
			x := tensor.New(tensor.WithShape(elems), tensor.WithBacking(v))
			b.SetBytes(elems * 4)
			b.ResetTimer()
			for range b.N {
				if err := c.AllReduce(x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
