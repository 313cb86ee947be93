//go:build mpi

package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/pipe/pipetest"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/transport/mpi"
	"github.com/ppgen/ppgen/runtime/transport/mpi/mpitest"
)

// The MPI tests re-run this test binary under mpirun, one job per
// scenario: TestMPI (and the demonstration, TestMPISendFirst) start
// `mpirun -np N <test binary> -test.run ^TestMPIChild$` with
// PPGEN_MPI_TEST naming the scenario, and check what the ranks print and
// how the job ends. MPI can be initialized once per process, hence one job
// per scenario.

const scenarioVar = "PPGEN_MPI_TEST"

// runJob runs scenario on np ranks under mpirun and returns the job's
// output (all ranks, stdout and stderr) and error.
func runJob(t *testing.T, np int, scenario string, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := mpitest.Args(t, np, os.Args[0], "-test.run=^TestMPIChild$", "-test.v")
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(append(os.Environ(), scenarioVar+"="+scenario), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mpirun %s: %v after 2 minutes:\n%s", scenario, ctx.Err(), out)
	}
	return string(out), err
}

// execCommand is exec.Command of argv.
func execCommand(argv []string) *exec.Cmd { return exec.Command(argv[0], argv[1:]...) }

// TestMPI runs the transport's scenarios under mpirun.
func TestMPI(t *testing.T) {
	for _, sync := range []bool{false, true} {
		name := map[bool]string{false: "buffered", true: "sync"}[sync]
		t.Run("exchange/"+name, func(t *testing.T) {
			out, err := runJob(t, 4, "exchange", "PPGEN_MPI_SYNC="+strconv.FormatBool(sync))
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for r := range 4 {
				if want := fmt.Sprintf("rank %d: exchange ok", r); !strings.Contains(out, want) {
					t.Errorf("no %q in the output:\n%s", want, out)
				}
			}
		})
	}
	t.Run("crossed", func(t *testing.T) {
		out, err := runJob(t, 2, "crossed")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for r := range 2 {
			if want := fmt.Sprintf("rank %d: crossed ok", r); !strings.Contains(out, want) {
				t.Errorf("no %q in the output:\n%s", want, out)
			}
		}
	})
	t.Run("fingerprint", func(t *testing.T) {
		out, err := runJob(t, 3, "fingerprint")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for r := range 3 {
			want := fmt.Sprintf(`rank %d: refused: transport: rank %d: handshake refused: the ranks run different schedules (fingerprints differ): ranks 0, 1 have "sched-a" (schedule 1f1b (P=3, V=1, M=4)), rank 2 has "sched-b" (schedule zbv (P=3, V=2, M=4)); every rank must run the same generated schedule: build every rank from the same generated code (go generate ./... and rebuild`, r, r)
			if !strings.Contains(out, want) {
				t.Errorf("no %q in the output:\n%s", want, out)
			}
		}
	})
	t.Run("abort", func(t *testing.T) {
		out, err := runJob(t, 2, "abort")
		if err == nil {
			t.Fatalf("the job of an aborting rank succeeded:\n%s", out)
		}
		for _, want := range []string{
			// Rank 0's synchronous send times out and names rank 0, the peer, the channel.
			"rank 0: send failed: transport: rank 0: send act to rank 1: no progress for 1s (PPGEN_TIMEOUT (mpi.Config.Timeout)): rank 1 did not read act; synchronous send (mpi.Config.Sync) of (stage 0, micro 7): rank 1 has not started the matching receive",
			"transport: MPI: aborting the job",
			// Rank 1, waiting on another channel, learns why: rank 0's
			// timeout blames rank 1, which did not read (as over TCP).
			"rank 1: recv failed: transport: rank 1: recv grad from rank 0: rank 1 did not read act for 1s (no progress, PPGEN_TIMEOUT (mpi.Config.Timeout)) (reported by rank 0)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in the output:\n%s", want, out)
			}
		}
	})
}

// TestMPISendFirst is the demonstration that the rendezvous model is real:
// the send-first program (mpi_demo_test.go) trains like sequential
// training over buffered MPI and deadlocks under Config.Sync, where the
// progress timeout names the blocked ranks and steps.
func TestMPISendFirst(t *testing.T) {
	t.Run("buffered", func(t *testing.T) {
		out, err := runJob(t, 2, "send-first")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "rank 1: send-first trained like sequential training") {
			t.Fatalf("rank 1 did not report its losses equal to sequential training:\n%s", out)
		}
	})
	t.Run("sync", func(t *testing.T) {
		out, err := runJob(t, 2, "send-first", "PPGEN_MPI_SYNC=true")
		if err == nil {
			t.Fatalf("the send-first program completed under rendezvous semantics:\n%s", out)
		}
		// Whichever rank times out first aborts the job; the other names
		// its own blocked step, with its own timeout ("pipe: rank 1: step
		// 1SEND_B0 to rank 0: no progress ...") or the first one's as
		// cause ("pipe: rank 1 step 1SEND_B0 (peer rank 0): ... (reported
		// by rank 0)").
		for _, want := range []string{
			`pipe: rank 0:? step 0SEND_F1 (to rank 1|\(peer rank 1\))`,
			`pipe: rank 1:? step 1SEND_B0 (to rank 0|\(peer rank 0\))`,
			`no progress for 2s \(PPGEN_TIMEOUT \(mpi.Config.Timeout\)\): rank [01] did not read (act|grad); synchronous send \(mpi.Config.Sync\) of \(stage [01], micro [01]\): rank [01] has not started the matching receive`,
		} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("no match for %q in the output:\n%s", want, out)
			}
		}
	})
}

// TestMPIChild is one rank of a scenario; it runs only under runJob.
func TestMPIChild(t *testing.T) {
	scenario := os.Getenv(scenarioVar)
	if scenario == "" {
		t.Skip("one rank of an MPI scenario: runs under mpirun (TestMPI)")
	}
	sync := os.Getenv("PPGEN_MPI_SYNC") == "true"
	switch scenario {
	case "exchange":
		childExchange(t, sync)
	case "fingerprint":
		childFingerprint(t)
	case "abort":
		childAbort(t)
	case "send-first":
		childSendFirst(t, sync)
	case "ping-pong":
		childPingPong(t, sync)
	case "flood":
		childFlood(t)
	case "crossed":
		childCrossed(t)
	default:
		t.Fatalf("unknown scenario %q", scenario)
	}
}

// launcherRank is this process's rank as the launcher set it before MPI
// starts: OpenMPI's OMPI_COMM_WORLD_RANK or PMI's PMI_RANK (MPICH).
func launcherRank() string {
	if v := os.Getenv("OMPI_COMM_WORLD_RANK"); v != "" {
		return v
	}
	return os.Getenv("PMI_RANK")
}

// msg is the k-th message from rank src to rank dst on ch: its shape, dtype
// and contents depend on all four.
func msg(src, dst int, ch abi.Channel, k int) (transport.Tag, *tensor.Dense) {
	tag := transport.Tag{Stage: int32(src), Micro: int32(k)}
	val := func(i int) float64 { return float64(src*1000+dst*100+int(ch)*10+k) + float64(i)/4 }
	switch k % 4 {
	case 0: // scalar
		return tag, tensor.New(tensor.FromScalar(val(0)))
	case 1: // float32 matrix
		v := make([]float32, 6)
		for i := range v {
			v[i] = float32(val(i))
		}
		return tag, tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(v))
	case 2: // empty
		return tag, tensor.New(tensor.WithShape(0, 4), tensor.WithBacking([]float64{}))
	default: // 1 MiB
		v := make([]float64, 128*1024)
		for i := range v {
			v[i] = val(i)
		}
		return tag, tensor.New(tensor.WithShape(128, 1024), tensor.WithBacking(v))
	}
}

// same reports whether two tensors have the same dtype, shape and elements.
func same(a, b *tensor.Dense) bool {
	if a.Dtype() != b.Dtype() || !a.Shape().Eq(b.Shape()) {
		return false
	}
	if a.Dtype() == tensor.Float32 {
		x, y := a.Float32s(), b.Float32s()
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return len(x) == len(y)
	}
	x, y := a.Float64s(), b.Float64s()
	for i := range x {
		if x[i] != y[i] && !(math.IsNaN(x[i]) && math.IsNaN(y[i])) {
			return false
		}
	}
	return len(x) == len(y)
}

const exchangeK = 8 // messages per (peer, channel)

// childExchange: every rank sends exchangeK messages to every peer on every
// channel (one goroutine per peer) while receiving from every (peer,
// channel) (one goroutine each), checking order, tags and contents; then
// a ring batch; then a Go panic still recovers after MPI started.
func childExchange(t *testing.T, syncSends bool) {
	tr, err := mpi.New(mpi.Config{Sync: syncSends, Timeout: 30 * time.Second, Fingerprint: "exchange"})
	if err != nil {
		t.Fatal(err)
	}
	r, w := tr.Rank(), tr.World()
	if want := launcherRank(); want != strconv.Itoa(r) {
		t.Fatalf("rank %d, but the launcher says %q", r, want)
	}
	if fp := tr.(transport.Fingerprinter).Fingerprint(); fp != "exchange" {
		t.Fatalf("Fingerprint() = %q", fp)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*w*wire.Channels)
	for p := range w {
		if p == r {
			continue
		}
		wg.Go(func() {
			for k := range exchangeK {
				for ch := abi.ActChannel; ch <= abi.DataChannel; ch++ {
					tag, x := msg(r, p, ch, k)
					if err := tr.Send(p, ch, tag, x); err != nil {
						errs <- err
						return
					}
				}
			}
		})
		for ch := abi.ActChannel; ch <= abi.DataChannel; ch++ {
			wg.Go(func() {
				for k := range exchangeK {
					tag, got, err := tr.Recv(p, ch)
					if err != nil {
						errs <- err
						return
					}
					wantTag, want := msg(p, r, ch, k)
					if tag != wantTag || !same(got, want) {
						errs <- fmt.Errorf("message %d from rank %d on %s: tag %v shape %v, want tag %v shape %v", k, p, ch, tag, got.Shape(), wantTag, want.Shape())
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// A ring batch: act forward, grad backward, two data messages forward;
	// under Sync it completes only because every op starts before any waits.
	b, ok := tr.(transport.Batcher)
	if !ok {
		t.Fatal("the MPI transport is not a transport.Batcher")
	}
	next, prev := (r+1)%w, (r+w-1)%w
	t0, x0 := msg(r, next, abi.ActChannel, 3)
	t1, x1 := msg(r, prev, abi.GradChannel, 1)
	t2, x2 := msg(r, next, abi.DataChannel, 5)
	t3, x3 := msg(r, next, abi.DataChannel, 7)
	ops := []transport.BatchOp{
		{Peer: next, Ch: abi.ActChannel, Send: true, Tag: t0, T: x0},
		{Peer: prev, Ch: abi.ActChannel},
		{Peer: prev, Ch: abi.GradChannel, Send: true, Tag: t1, T: x1},
		{Peer: next, Ch: abi.GradChannel},
		{Peer: prev, Ch: abi.DataChannel},
		{Peer: prev, Ch: abi.DataChannel},
		{Peer: next, Ch: abi.DataChannel, Send: true, Tag: t2, T: x2},
		{Peer: next, Ch: abi.DataChannel, Send: true, Tag: t3, T: x3},
	}
	if err := b.Batch(ops); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		op       int
		src, dst int
		ch       abi.Channel
		k        int
	}{{1, prev, r, abi.ActChannel, 3}, {3, next, r, abi.GradChannel, 1}, {4, prev, r, abi.DataChannel, 5}, {5, prev, r, abi.DataChannel, 7}} {
		tag, x := msg(want.src, want.dst, want.ch, want.k)
		if got := ops[want.op]; got.Tag != tag || !same(got.T, x) {
			t.Fatalf("batch receive %d (op %d): tag %v, want %v (or the contents differ)", i, want.op, got.Tag, tag)
		}
	}

	// OpenMPI's own signal handlers are off: a nil dereference is a Go panic.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a nil dereference did not panic")
			}
		}()
		var p *tensor.Dense
		_ = p.Shape()[0]
	}()

	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := tr.Send(next, abi.ActChannel, t0, x0); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Send after Close: %v, want transport.ErrClosed", err)
	}
	fmt.Printf("rank %d: exchange ok\n", r)
}

// childCrossed: buffered, both ranks send each other 4 MiB messages
// before either receives (each Send waits for the other's receive queue,
// which the waiting Send itself keeps taking in), then the same while one
// rank sits in a barrier of its own instead of receiving.
func childCrossed(t *testing.T) {
	tr, err := mpi.New(mpi.Config{Timeout: 20 * time.Second, Fingerprint: "crossed"})
	if err != nil {
		t.Fatal(err)
	}
	r := tr.Rank()
	peer := 1 - r
	x := tensor.New(tensor.WithShape(1<<20), tensor.WithBacking(make([]float32, 1<<20)))
	for k := range 3 {
		if err := tr.Send(peer, abi.ActChannel, transport.Tag{Micro: int32(k)}, x); err != nil {
			t.Fatal(err)
		}
	}
	for k := range 3 {
		tag, y, err := tr.Recv(peer, abi.ActChannel)
		if err != nil || tag.Micro != int32(k) || len(y.Float32s()) != 1<<20 {
			t.Fatalf("recv %d: tag %v, err %v", k, tag, err)
		}
	}
	// Rank 1 sends while rank 0 waits in a collective that rank 1 joins
	// only after its send returned.
	g, err := tr.(transport.Collectives).NewGroup([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	one := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{1}))
	if r == 1 {
		if err := tr.Send(0, abi.GradChannel, transport.Tag{}, x); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.AllReduceSum(one); err != nil {
		t.Fatal(err)
	}
	if r == 0 {
		if _, _, err := tr.Recv(1, abi.GradChannel); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("rank %d: crossed ok\n", r)
}

// childFingerprint: rank 2 runs another schedule; every rank is refused.
func childFingerprint(t *testing.T) {
	fp, sched := "sched-a", "1f1b (P=3, V=1, M=4)"
	if launcherRank() == "2" {
		fp, sched = "sched-b", "zbv (P=3, V=2, M=4)"
	}
	tr, err := mpi.New(mpi.Config{Fingerprint: fp, Schedule: sched, Timeout: 30 * time.Second})
	if err == nil {
		tr.Close()
		t.Fatal("ranks with different fingerprints started")
	}
	fmt.Printf("rank %s: refused: %v\n", launcherRank(), err)
}

// childAbort: rank 0's synchronous send to rank 1 is never received, times
// out, and rank 0 aborts; rank 1, waiting for a message on another channel,
// fails naming rank 0 and its cause, then the job ends.
func childAbort(t *testing.T) {
	timeout := 30 * time.Second
	if launcherRank() == "0" {
		timeout = time.Second
	}
	tr, err := mpi.New(mpi.Config{Sync: true, Timeout: timeout, Fingerprint: "abort", AbortLinger: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Rank() == 0 {
		_, x := msg(0, 1, abi.ActChannel, 3)
		err := tr.Send(1, abi.ActChannel, transport.Tag{Stage: 0, Micro: 7}, x)
		var pe *transport.ProgressError
		if !errors.As(err, &pe) || pe.Rank != 0 || pe.Peer != 1 {
			t.Fatalf("send: %v, want a *transport.ProgressError of rank 0 naming rank 1", err)
		}
		fmt.Printf("rank 0: send failed: %v\n", err)
		tr.Abort(err)
		t.Fatal("Abort returned")
	}
	_, _, err = tr.Recv(0, abi.GradChannel)
	fmt.Printf("rank 1: recv failed: %v\n", err)
	os.Stdout.Sync()
	tr.Abort(err)
	t.Fatal("Abort returned")
}

// childSendFirst runs the send-first program (mpi_demo_test.go) on one rank.
func childSendFirst(t *testing.T, sync bool) {
	tr, err := mpi.New(mpi.Config{Sync: sync, Timeout: 2 * time.Second, Fingerprint: "test:1f1b-send-first"})
	if err != nil {
		t.Fatal(err)
	}
	r := tr.Rank()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	x, data, err := sendFirstRank(r, tr, log)
	if err != nil {
		t.Fatal(err)
	}
	losses, err := sendFirstTrain(r, x, data)
	if err != nil {
		// Under Sync the runtime aborts the job before Run returns.
		t.Fatalf("rank %d: %v", r, err)
	}
	x.Close()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if r == 1 {
		ref := pipetest.Sequential(pipetest.NewStages(2), 2, sendFirstIters, false)
		for it := range ref {
			if !pipetest.SameFloats(losses[it], ref[it]) {
				t.Fatalf("iteration %d: losses %v, sequential training %v", it, losses[it], ref[it])
			}
		}
		fmt.Println("rank 1: send-first trained like sequential training")
	}
}
