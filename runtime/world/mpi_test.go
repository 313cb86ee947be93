//go:build mpi

package world_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/world"
)

// helperVar, set to a world size, makes this test binary one rank of an
// "mpi" world of that size (mpiRank) instead of running the tests, so
// that the tests can start it under mpirun.
const helperVar = "PPGEN_WORLD_MPI_SIZE"

// configVar makes the ranks of mpiRank open with Options.Config, rank 1 on
// another -seed.
const configVar = "PPGEN_WORLD_MPI_CONFIG"

// stopVar makes rank 2 of mpiRank stop itself (SIGSTOP) after Open, and
// the ranks time out after 2 s and print whom they blame.
const stopVar = "PPGEN_WORLD_MPI_STOP"

func init() {
	if v := os.Getenv(helperVar); v != "" {
		size, _ := strconv.Atoi(v)
		if err := mpiRank(size); err != nil {
			fmt.Println("rank error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// mpiRank opens an "mpi" world of size ranks with synchronous sends, passes
// a tensor around the ring and closes it.
func mpiRank(size int) error {
	o := world.Options{Size: size, Sync: true, Fingerprint: "fp", Schedule: "world test", Timeout: 20 * time.Second}
	stop := os.Getenv(stopVar) != ""
	if stop {
		o.Timeout = 2 * time.Second
	}
	if os.Getenv(configVar) != "" { // rank 1 runs -seed 2, the others -seed 1
		seed := "1"
		if os.Getenv("OMPI_COMM_WORLD_RANK") == "1" || os.Getenv("PMI_RANK") == "1" {
			seed = "2"
		}
		o.Config = map[string]string{"-seed": seed}
	}
	w, err := world.Open(context.Background(), "mpi", o)
	if err != nil {
		return err
	}
	ep := w.Endpoint()
	r, n := ep.Rank(), w.Size
	if stop && r == 2 {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
	x := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{float64(r)}))
	if r == 0 { // synchronous sends: rank 0 sends first, the others receive first
		err = ep.Send(1%n, abi.ActChannel, transport.Tag{}, x)
	}
	if err == nil {
		_, got, rerr := ep.Recv((r+n-1)%n, abi.ActChannel)
		if err = rerr; err == nil && got.Float64s()[0] != float64((r+n-1)%n) {
			err = fmt.Errorf("rank %d received %v", r, got.Float64s())
		}
	}
	if err == nil && r != 0 {
		err = ep.Send((r+1)%n, abi.ActChannel, transport.Tag{}, x)
	}
	if err != nil {
		var pe *transport.PeerError
		if errors.As(err, &pe) { // before Abort: MPI_Abort ends the job
			fmt.Printf("rank %d blames rank %d\n", r, pe.Peer)
		}
		w.Abort(err)
		return err
	}
	fmt.Printf("rank %d of %d ok\n", r, n)
	return w.Close()
}

// mpirun runs this test binary as np ranks of an "mpi" world of size.
func mpirun(t *testing.T, np, size int, env ...string) (string, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an mpirun job")
	}
	path, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skipf("mpirun not found: install an MPI (Debian: apt-get install libopenmpi-dev openmpi-bin); CI does")
	}
	argv := []string{path}
	if v, _ := exec.Command(path, "--version").CombinedOutput(); strings.Contains(string(v), "Open MPI") {
		argv = append(argv, "--oversubscribe")
		if os.Geteuid() == 0 {
			argv = append(argv, "--allow-run-as-root")
		}
	}
	argv = append(argv, "-np", strconv.Itoa(np), os.Args[0])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), helperVar+"="+strconv.Itoa(size)), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMPIWorld: under mpirun -np 3, every rank opens its endpoint of an
// "mpi" world and passes a message around the ring.
func TestMPIWorld(t *testing.T) {
	out, err := mpirun(t, 3, 3)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := strings.Count(out, " of 3 ok\n"); got != 3 {
		t.Fatalf("%d ranks passed the ring, want 3:\n%s", got, out)
	}
}

// TestMPIWorldWrongSize: a world that needs 3 ranks under mpirun -np 2 is
// refused, naming the -np to use.
func TestMPIWorldWrongSize(t *testing.T) {
	out, err := mpirun(t, 2, 3)
	if err == nil {
		t.Fatalf("exited 0:\n%s", out)
	}
	if !strings.Contains(out, "MPI started 2 processes but the job needs 3 ranks: run mpirun -np 3") {
		t.Fatalf("no rank named the -np to use:\n%s", out)
	}
}

// TestMPIWorldConfigMismatch: under mpirun -np 3, rank 1 on another -seed
// (Options.Config) fails the ranks at Open, naming the flag and the rank.
func TestMPIWorldConfigMismatch(t *testing.T) {
	out, err := mpirun(t, 3, 3, configVar+"=1")
	if err == nil {
		t.Fatalf("exited 0:\n%s", out)
	}
	// mpirun ends the job when the first rank exits 1: the others may not
	// print theirs.
	if got := strings.Count(out, "the ranks run different configurations: rank 1 runs -seed 2, rank 0 -seed 1"); got < 1 || strings.Contains(out, " of 3 ok") {
		t.Fatalf("%d ranks named the difference, want at least 1 and none passing the ring:\n%s", got, out)
	}
}

// TestMPIStoppedRankBlamed: under mpirun -np 4, rank 2 stops (SIGSTOP)
// after Open; rank 1's synchronous send to it and rank 3's receive from it
// time out, and so does rank 0's receive from rank 3, alive and itself
// waiting on rank 2. MPI has no heartbeats: every rank that reports blames
// rank 2, found stopped on this host (launch.StoppedPeer), not the rank it
// waited on (before, rank 0 blamed rank 3 and its abort spread that).
func TestMPIStoppedRankBlamed(t *testing.T) {
	out, err := mpirun(t, 4, 4, stopVar+"=1")
	if err == nil {
		t.Fatalf("exited 0:\n%s", out)
	}
	blamed := 0
	for _, line := range strings.Split(out, "\n") {
		if _, who, ok := strings.Cut(line, " blames rank "); ok {
			if who != "2" {
				t.Errorf("%q: want rank 2 blamed\n%s", line, out)
			}
			blamed++
		}
	}
	if blamed == 0 || !strings.Contains(out, "rank 2 is stopped by a signal") {
		t.Fatalf("no rank blamed the stopped rank 2:\n%s", out)
	}
}
