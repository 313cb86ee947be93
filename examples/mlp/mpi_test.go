//go:build mpi

package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/transport/mpi/mpitest"
)

// asMain is the first argument that makes this test binary run the
// command's main instead of the tests, so that TestMPIMatchesSequential can
// start it under mpirun without building the command.
const asMain = "-as-mlp"

func init() {
	if len(os.Args) > 1 && os.Args[1] == asMain {
		os.Args = append(os.Args[:1], os.Args[2:]...)
		main()
		os.Exit(0)
	}
}

// TestMPIMatchesSequential: under mpirun, with the schedule's own rank
// count, every schedule trains exactly as sequential training over MPI,
// with buffered and with synchronous (rendezvous) sends.
func TestMPIMatchesSequential(t *testing.T) {
	if testing.Short() {
		t.Skip("starts mpirun jobs")
	}
	for _, name := range scheduleNames() {
		for _, sync := range []bool{false, true} {
			t.Run(name+"/"+map[bool]string{false: "buffered", true: "sync"}[sync], func(t *testing.T) {
				n := catalog[name].Spec.Ranks
				args := []string{os.Args[0], asMain, "-transport", "mpi", "-check", "-schedule", name, "-steps", "3"}
				if sync {
					args = append(args, "-mpi-sync")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				argv := mpitest.Args(t, n, args...)
				cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
				cmd.Env = append(withoutRankEnv(os.Environ()), "PPGEN_TIMEOUT=60s")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
				}
				if got := strings.Count(string(out), "check: max relative difference"); got != n {
					t.Fatalf("%d ranks reported a check, want %d:\n%s", got, n, out)
				}
			})
		}
	}
}

// TestTCPUnderMPIRun: the TCP transport needs no wrapper under mpirun:
// launch.FromEnv takes the ranks from the MPI launcher's variables and, on
// one node, the rendezvous from the job (127.0.0.1, a port from OpenMPI's
// job number or MASTER_PORT under another MPI).
func TestTCPUnderMPIRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an mpirun job")
	}
	argv := mpitest.Args(t, 4, os.Args[0], asMain, "-transport", "tcp", "-check", "-steps", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(withoutRankEnv(os.Environ()), "PPGEN_TOKEN=0123456789abcdef0123456789abcdef", "PPGEN_TIMEOUT=60s")
	if v, _ := exec.Command(argv[0], "--version").CombinedOutput(); !strings.Contains(string(v), "Open MPI") {
		cmd.Env = append(cmd.Env, "MASTER_PORT=29517") // only OpenMPI's job number gives a port
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	if got := strings.Count(string(out), "check: max relative difference"); got != 4 {
		t.Fatalf("%d ranks reported a check, want 4:\n%s", got, out)
	}
}

// TestMPIDPMatchesSequential: under mpirun -np 8, -dp 2 over MPI (the
// FSDP catalog entry and plain data parallelism on 1f1b), buffered and
// with synchronous sends, with MPI's own collectives (a communicator per
// DP group) and with runtime/collective's over Send and Recv: every rank
// equals sequential training on the global batch (at two members MPI's
// sum is a + b, so the bits are the member order's too); float32 once.
func TestMPIDPMatchesSequential(t *testing.T) {
	if testing.Short() {
		t.Skip("starts mpirun jobs")
	}
	for _, c := range []struct {
		schedule string
		sync     bool
		coll     string
		dtype    string
	}{
		{"1f1b-fsdp-swap", false, "native", "float64"},
		{"1f1b-fsdp-swap", true, "native", "float64"},
		{"1f1b", false, "native", "float64"},
		{"1f1b", true, "native", "float32"},
		{"1f1b", true, "sendrecv", "float64"},
		{"1f1b-fsdp-swap", true, "member-order", "float32"},
		{"1f1b-tie", true, "member-order", "float64"},
	} {
		mode := map[bool]string{false: "buffered", true: "sync"}[c.sync]
		t.Run(c.schedule+"/"+mode+"/"+c.coll+"/"+c.dtype, func(t *testing.T) {
			args := []string{os.Args[0], asMain, "-transport", "mpi", "-dp", "2", "-check", "-schedule", c.schedule,
				"-steps", "2", "-collectives", c.coll, "-dtype", c.dtype}
			if c.sync {
				args = append(args, "-mpi-sync")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			argv := mpitest.Args(t, 8, args...)
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Env = append(withoutRankEnv(os.Environ()), "PPGEN_TIMEOUT=60s")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
			}
			if got := strings.Count(string(out), "check: max relative difference"); got != 8 {
				t.Fatalf("%d ranks reported a check, want 8:\n%s", got, out)
			}
			native := strings.Count(string(out), "collectives are the transport's own")
			if want := map[string]int{"native": 8, "member-order": 8, "sendrecv": 0}[c.coll]; native != want {
				t.Fatalf("%d ranks ran MPI's own collectives, want %d:\n%s", native, want, out)
			}
		})
	}
}

// TestMPIDPWrongWorld: -dp 2 under mpirun -np 4 (not ranks × 2 = 8) is
// refused, naming the -np to use (every rank refuses; mpirun ends the job
// when the first exits, so the others' lines may be cut).
func TestMPIDPWrongWorld(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an mpirun job")
	}
	argv := mpitest.Args(t, 4, os.Args[0], asMain, "-transport", "mpi", "-dp", "2", "-schedule", "1f1b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(withoutRankEnv(os.Environ()), "PPGEN_TIMEOUT=30s")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("exited 0:\n%s", out)
	}
	if !strings.Contains(string(out), "mlp: train: MPI started 4 processes but schedule 1f1b has 4 ranks and -dp 2 makes 8: run mpirun -np 8\n") {
		t.Fatalf("no rank named the -np to use:\n%s", out)
	}
}
