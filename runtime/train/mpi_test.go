//go:build mpi

package train_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/transport/mpi/mpitest"
)

// mpirunJob runs j under mpirun -np 4 (the programs' rank count) and
// returns its training losses, which every rank must report alike.
func mpirunJob(t *testing.T, j rankJob) []float64 {
	t.Helper()
	j.World = "mpi"
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
	return jobLosses(t, out, 4)
}

// TestMPIResumeBitIdentical: under mpirun -np 4, over MPI, 1f1b at P=4
// trained 2N steps uninterrupted equals N steps, a save, and N more
// resumed from it, bit for bit (the losses of the last N steps, every
// parameter and optimizer tensor at the end), and equals the in-process
// job too (the world's default collectives sum in member order).
func TestMPIResumeBitIdentical(t *testing.T) {
	dir := t.TempDir()
	full, first, second := filepath.Join(dir, "full"), filepath.Join(dir, "first"), filepath.Join(dir, "second")
	whole := mpirunJob(t, rankJob{Program: "onef1b", Steps: 2 * half, Checkpoint: full})
	mpirunJob(t, rankJob{Program: "onef1b", Steps: 2 * half, Stop: half, Checkpoint: first})
	resumed := mpirunJob(t, rankJob{Program: "onef1b", Steps: 2 * half, Checkpoint: second, Resume: first})
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
			got := mpirunJob(t, rankJob{Program: "clip", Steps: 2 * half, Collectives: coll})
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
// every stage whole (-recompute full), half of each stage's layers
// (-recompute selective:0.5, nn.Sequential's Drop and Rebuild) and the
// layers marked.json marks (-recompute model, not a prefix) trains to the
// losses of 1f1b without recompute in process, bit for bit.
func TestMPIRecompute(t *testing.T) {
	ref := losses(run(t, config(onef1b, 1, 2*half)))
	for _, prog := range []string{"recompute", "selective", "marked"} {
		t.Run(prog, func(t *testing.T) {
			same(t, "losses over MPI with recompute and in process without", mpirunJob(t, rankJob{Program: prog, Steps: 2 * half}), ref)
		})
	}
}

// TestMPITower: under mpirun -np 4, over MPI, a job training a tower under
// mpipe (P=4; the tower's output gradients go back to their owners and
// the replicas' gradients are summed across the ranks at OPT_STEP) equals
// the in-process job bit for bit (losses; every layer's and the tower's
// parameters and AdamW state in the final checkpoint), with owner backward
// and without it (TowerAtFirst); and with owner backward, N steps, a save
// and N more resumed from it under mpirun equal the 2N steps.
func TestMPITower(t *testing.T) {
	for _, atFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("TowerAtFirst=", atFirst), func(t *testing.T) {
			dir := t.TempDir()
			full, inproc := filepath.Join(dir, "full"), filepath.Join(dir, "inproc")
			whole := mpirunJob(t, rankJob{Program: "mpipe", Steps: 2 * half, Checkpoint: full, Tower: true, AtFirst: atFirst})
			c := config(mpipe, 1, 2*half)
			c.Tower, c.TowerAtFirst, c.CheckpointDir = (&towers{}).build, atFirst, inproc
			same(t, "losses over MPI and in process", whole, losses(run(t, c)))
			same(t, "parameters over MPI and in process", params(t, full), params(t, inproc))
			if atFirst {
				return
			}
			first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
			mpirunJob(t, rankJob{Program: "mpipe", Steps: 2 * half, Stop: half, Checkpoint: first, Tower: true})
			resumed := mpirunJob(t, rankJob{Program: "mpipe", Steps: 2 * half, Checkpoint: second, Resume: first, Tower: true})
			same(t, "losses of the resumed steps", resumed, whole[half:])
			same(t, "parameters and optimizer state at the end", params(t, second), params(t, full))
		})
	}
}
