package world_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/world"
)

// TestCheck: the four names are known (mpi and nccl as this build has
// them); any other is refused naming the value and the choices.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name, want string // want: "" for accepted
	}{
		{"inproc", ""},
		{"tcp", ""},
		{"tpc", `unknown transport "tpc": want inproc, tcp, mpi or nccl`},
		{"", `unknown transport "": want inproc, tcp, mpi or nccl`},
		{"TCP", `unknown transport "TCP"`},
		{"mpi", map[bool]string{true: "", false: "rebuild with -tags mpi"}[world.Built("mpi")]},
		{"nccl", map[bool]string{true: "", false: "rebuild with -tags nccl"}[world.Built("nccl")]},
	} {
		err := world.Check(c.name)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Check(%q) = %v, want nil", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Check(%q) = %v, want %q", c.name, err, c.want)
		}
	}
	if got := strings.Join(world.Names(), " "); got != "inproc tcp mpi nccl" {
		t.Errorf("Names() = %s", got)
	}
}

// TestOpenRefuses: options that do not fit are refused, before anything
// starts, with what to change.
func TestOpenRefuses(t *testing.T) {
	env := &launch.Env{Rank: 0, World: 5, MasterAddr: "127.0.0.1", MasterPort: 1, Token: "5ec7e75ec7e75ec7e75ec7e75ec7e75e", Source: "torchrun"}
	for _, c := range []struct {
		name string
		o    world.Options
		want string
	}{
		{"tpc", world.Options{Size: 2}, `unknown transport "tpc": want inproc, tcp, mpi or nccl`},
		{"inproc", world.Options{}, `transport "inproc" runs every rank in this process: set the world size (Options.Size)`},
		{"inproc", world.Options{Size: -1}, "world size -1 is negative"},
		{"inproc", world.Options{Size: 2, Timeout: -time.Second}, "timeout -1s is negative"},
		{"tcp", world.Options{RendezvousTimeout: -time.Second, Env: env}, "rendezvous timeout -1s is negative"},
		{"inproc", world.Options{Size: 2, Sync: true}, `synchronous sends are the MPI transport's: open "mpi", not "inproc"`},
		{"tcp", world.Options{Sync: true, Env: env}, `synchronous sends are the MPI transport's: open "mpi", not "tcp"`},
		{"inproc", world.Options{Size: 2, Loopback: true}, `Loopback runs a TCP world in this process: open "tcp", not "inproc"`},
		{"tcp", world.Options{Loopback: true}, `transport "tcp" runs every rank in this process`},
		{"inproc", world.Options{Size: 2, Collectives: "telepathy"}, `collectives "telepathy": want member-order`},
		{"tcp", world.Options{Size: 4, SizeNote: "schedule 1f1b has 4 ranks", Env: env}, "WORLD_SIZE=5 but schedule 1f1b has 4 ranks: start 4 ranks"},
		{"tcp", world.Options{Size: 4, Env: &launch.Env{World: 2, Source: "slurm"}}, "SLURM_NTASKS=2 but the job needs 4 ranks: start 4 ranks"},
	} {
		w, err := world.Open(context.Background(), c.name, c.o)
		if err == nil {
			w.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q, %+v) = %v, want %q", c.name, c.o, err, c.want)
		}
	}
}

// ring sends one tensor from every endpoint to the next and checks what
// each receives; the endpoints run concurrently.
func ring(t *testing.T, eps []transport.Transport) {
	t.Helper()
	n := len(eps)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, ep := range eps {
		wg.Go(func() {
			x := tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{float64(r), 1}))
			if err := ep.Send((r+1)%n, abi.ActChannel, transport.Tag{Stage: int32(r)}, x); err != nil {
				errs[r] = err
				return
			}
			tag, got, err := ep.Recv((r+n-1)%n, abi.ActChannel)
			if err != nil {
				errs[r] = err
				return
			}
			if from := (r + n - 1) % n; tag.Stage != int32(from) || got.Float64s()[0] != float64(from) {
				errs[r] = fmt.Errorf("rank %d received %v %v from rank %d", r, tag, got.Float64s(), from)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestInProc: an in-process world of three ranks passes messages around a
// ring, and its collectives follow the mode asked for.
func TestInProc(t *testing.T) {
	w, err := world.Open(context.Background(), "inproc", world.Options{Size: 3, Timeout: 5 * time.Second, Collectives: "sendrecv"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Name != "inproc" || w.Size != 3 || len(w.Endpoints) != 3 || w.Endpoint().Rank() != 0 {
		t.Fatalf("world %s of %d with %d endpoints, first rank %d; want inproc of 3, all here", w.Name, w.Size, len(w.Endpoints), w.Endpoint().Rank())
	}
	ring(t, w.Endpoints)
	// An all-reduce over the world's own Comms: 0+1+2 on every rank.
	var wg sync.WaitGroup
	sums := make([]float64, 3)
	errs := make([]error, 3)
	for r, ep := range w.Endpoints {
		wg.Go(func() {
			c, err := w.NewComm(ep, abi.DataChannel)
			if err != nil {
				errs[r] = err
				return
			}
			x := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{float64(r)}))
			errs[r] = c.AllReduce(x)
			sums[r] = x.Float64s()[0]
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, s := range sums {
		if s != 3 {
			t.Errorf("rank %d: all-reduce sum %v, want 3", r, s)
		}
	}
}

// TestLoopback: a TCP world of three ranks in this process, on 127.0.0.1.
func TestLoopback(t *testing.T) {
	w, err := world.Open(context.Background(), "tcp", world.Options{Size: 3, Loopback: true, Fingerprint: "fp", Schedule: "test (P=3)", Timeout: 10 * time.Second, RendezvousTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Size != 3 || len(w.Endpoints) != 3 {
		t.Fatalf("world of %d with %d endpoints, want 3 and 3", w.Size, len(w.Endpoints))
	}
	if fp := w.Endpoints[2].(transport.Fingerprinter).Fingerprint(); fp != "fp" {
		t.Errorf("fingerprint %q, want fp", fp)
	}
	ring(t, w.Endpoints)
}

// openFromEnv opens rank r's endpoint of a TCP world of two ranks from a
// launcher's environment (rendezvous on 127.0.0.1:port), as each of two
// processes would, with the fingerprint and schedule of fps[r].
func openFromEnv(port int, fps [2]string) ([]transport.Transport, []error) {
	eps := make([]transport.Transport, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		env := &launch.Env{Rank: r, World: 2, MasterAddr: "127.0.0.1", MasterPort: port, Token: "5ec7e75ec7e75ec7e75ec7e75ec7e75e", Timeout: 10 * time.Second, Source: "torchrun"}
		o := world.Options{Size: 2, Env: env, Fingerprint: fps[r], Schedule: "schedule " + fps[r], RendezvousTimeout: 10 * time.Second}
		wg.Go(func() {
			w, err := world.Open(context.Background(), "tcp", o)
			if err != nil {
				errs[r] = err
				return
			}
			if len(w.Endpoints) != 1 || w.Size != 2 || w.Endpoint().Rank() != r {
				errs[r] = fmt.Errorf("rank %d: %d endpoints of rank %d in a world of %d, want one of rank %d in 2", r, len(w.Endpoints), w.Endpoint().Rank(), w.Size, r)
			}
			eps[r] = w.Endpoint()
		})
	}
	wg.Wait()
	return eps, errs
}

// freePort returns a TCP port of 127.0.0.1 that was free (a race with
// another process only fails the test).
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestTCPFromEnv: two ranks each open their one endpoint of a TCP world
// from a launcher's environment, as two processes would.
func TestTCPFromEnv(t *testing.T) {
	eps, errs := openFromEnv(freePort(t), [2]string{"fp", "fp"})
	for _, ep := range eps {
		if ep != nil {
			defer ep.Close()
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	ring(t, eps)
}

// TestTCPRefusesOtherSchedule: ranks of different schedules refuse each
// other, and the refusal names what each runs (Options.Schedule).
func TestTCPRefusesOtherSchedule(t *testing.T) {
	eps, errs := openFromEnv(freePort(t), [2]string{"fp-a", "fp-b"})
	for _, ep := range eps {
		if ep != nil {
			ep.Close()
		}
	}
	err := errors.Join(errs...)
	if err == nil || !strings.Contains(err.Error(), "schedule fp-a") || !strings.Contains(err.Error(), "schedule fp-b") {
		t.Fatalf("ranks of two schedules: %v; want a refusal naming both", err)
	}
}
