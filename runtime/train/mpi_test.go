//go:build mpi

package train_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/transport/mpi/mpitest"
)

// jobVar, set to a JSON mpiJob, makes this test binary one rank of that
// job over an "mpi" world (mpiRank) instead of running the tests, so that
// the tests can start it under mpirun.
const jobVar = "PPGEN_TRAIN_MPI_JOB"

// lossesLine starts the line on which every rank of an mpiJob prints the
// bits of its records' training losses.
const lossesLine = "train losses:"

// mpiJob is one job of the tests below, run by every rank of mpirun.
type mpiJob struct {
	Program     string // "onef1b", "clip", "recompute" or "selective"
	Steps, Stop int    // Config.Steps and StopAfter
	Checkpoint  string // Config.CheckpointDir
	Resume      string // Config.Resume
	Collectives string // world.Options.Collectives
}

func init() {
	if v := os.Getenv(jobVar); v != "" {
		if err := mpiRank(v); err != nil {
			fmt.Println("rank error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// mpiRank runs the job encoded in v on this rank of an "mpi" world and
// prints the bits of its losses.
func mpiRank(v string) error {
	var j mpiJob
	if err := json.Unmarshal([]byte(v), &j); err != nil {
		return fmt.Errorf("%s: %w", jobVar, err)
	}
	p, ok := map[string]train.Program{"onef1b": onef1b, "clip": clip, "recompute": recompute, "selective": selective}[j.Program]
	if !ok {
		return fmt.Errorf("%s: no program %q", jobVar, j.Program)
	}
	c := config(p, 1, j.Steps)
	c.StopAfter, c.CheckpointDir, c.Resume = j.Stop, j.Checkpoint, j.Resume
	c.World = "mpi"
	c.WorldOptions.Collectives = j.Collectives
	c.WorldOptions.Timeout = time.Minute
	res, err := train.Run(context.Background(), c)
	if err != nil {
		return err
	}
	var bits []string
	for _, l := range losses(res) {
		bits = append(bits, fmt.Sprintf("%016x", math.Float64bits(l)))
	}
	fmt.Println(lossesLine, strings.Join(bits, " "))
	return nil
}

// mpirunJob runs j under mpirun -np 4 (the programs' rank count) and
// returns its training losses, which every rank must report alike.
func mpirunJob(t *testing.T, j mpiJob) []float64 {
	t.Helper()
	if testing.Short() {
		t.Skip("starts mpirun jobs")
	}
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	argv := mpitest.Args(t, 4, os.Args[0])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), jobVar+"="+string(b))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s (%s): %v\n%s", strings.Join(argv, " "), b, err, out)
	}
	var lines []string
	for line := range strings.Lines(string(out)) {
		if rest, ok := strings.CutPrefix(line, lossesLine); ok {
			lines = append(lines, strings.TrimSpace(rest))
		}
	}
	if len(lines) != 4 {
		t.Fatalf("%d ranks reported their losses, want 4:\n%s", len(lines), out)
	}
	for _, l := range lines[1:] {
		if l != lines[0] {
			t.Fatalf("the ranks report different losses:\n%s", out)
		}
	}
	var ls []float64
	for f := range strings.FieldsSeq(lines[0]) {
		var u uint64
		if _, err := fmt.Sscanf(f, "%x", &u); err != nil {
			t.Fatalf("loss %q: %v", f, err)
		}
		ls = append(ls, math.Float64frombits(u))
	}
	return ls
}

// TestMPIResumeBitIdentical: under mpirun -np 4, over MPI, 1f1b at P=4
// trained 2N steps uninterrupted equals N steps, a save, and N more
// resumed from it, bit for bit (the losses of the last N steps, every
// parameter and optimizer tensor at the end), and equals the in-process
// job too (the world's default collectives sum in member order).
func TestMPIResumeBitIdentical(t *testing.T) {
	dir := t.TempDir()
	full, first, second := filepath.Join(dir, "full"), filepath.Join(dir, "first"), filepath.Join(dir, "second")
	whole := mpirunJob(t, mpiJob{Program: "onef1b", Steps: 2 * half, Checkpoint: full})
	mpirunJob(t, mpiJob{Program: "onef1b", Steps: 2 * half, Stop: half, Checkpoint: first})
	resumed := mpirunJob(t, mpiJob{Program: "onef1b", Steps: 2 * half, Checkpoint: second, Resume: first})
	if len(whole) != 2*half || len(resumed) != half {
		t.Fatalf("the jobs recorded %d and %d losses, want %d and %d", len(whole), len(resumed), 2*half, half)
	}
	same(t, "losses of the resumed steps", resumed, whole[half:])
	same(t, "parameters and optimizer state at the end", params(t, second), params(t, full))
	inproc := filepath.Join(dir, "inproc")
	c := config(onef1b, 1, 2*half)
	c.CheckpointDir = inproc
	same(t, "losses over MPI and in process", whole, losses(run(t, c)))
	same(t, "parameters over MPI and in process", params(t, full), params(t, inproc))
}

// TestMPIClip: a -clip program's ALL_REDUCE (the global gradient norm)
// runs over MPI under mpirun -np 4: with the default collectives (MPI's
// data movement, the sums in member order) the losses equal the
// in-process job's bit for bit; with MPI's own sums within crossTol.
func TestMPIClip(t *testing.T) {
	ref := losses(run(t, config(clip, 1, 2*half)))
	for _, coll := range []string{"member-order", "native"} {
		t.Run(coll, func(t *testing.T) {
			got := mpirunJob(t, mpiJob{Program: "clip", Steps: 2 * half, Collectives: coll})
			if coll == "member-order" {
				same(t, "losses over MPI and in process", got, ref)
				return
			}
			if d := maxDiff(t, "losses", got, ref); d > crossTol {
				t.Fatalf("losses over MPI %v differ from the in-process job's %v by %g", got, ref, d)
			}
		})
	}
}

// TestMPIRecompute: under mpirun -np 4, over MPI, 1f1b at P=4 recomputing
// every stage whole (-recompute full) and half of each stage's layers
// (-recompute selective:0.5, nn.Sequential's Drop and Rebuild) trains to
// the losses of 1f1b without recompute in process, bit for bit.
func TestMPIRecompute(t *testing.T) {
	ref := losses(run(t, config(onef1b, 1, 2*half)))
	for _, prog := range []string{"recompute", "selective"} {
		t.Run(prog, func(t *testing.T) {
			same(t, "losses over MPI with recompute and in process without", mpirunJob(t, mpiJob{Program: prog, Steps: 2 * half}), ref)
		})
	}
}
