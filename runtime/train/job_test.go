//go:build mpi || nccl

package train_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/train"
)

// jobVar, set to a JSON rankJob, makes this test binary one rank of that
// job over an "mpi" or "nccl" world (jobRank) instead of running the
// tests, so that the tests can start it under mpirun (mpi_test.go) or as
// the processes of an NCCL world (nccl_test.go).
const jobVar = "PPGEN_TRAIN_RANK_JOB"

// lossesLine starts the line on which every rank of a rankJob prints the
// bits of its records' training losses.
const lossesLine = "train losses:"

// rankJob is one job of the MPI and NCCL tests, run by every rank.
type rankJob struct {
	World       string // Config.World: "mpi" or "nccl"
	Program     string // "onef1b", "clip", "recompute", "selective", "marked" or "mpipe"
	Steps, Stop int    // Config.Steps and StopAfter
	Checkpoint  string // Config.CheckpointDir
	Resume      string // Config.Resume
	Collectives string // world.Options.Collectives
	Tower       bool   // Config.Tower: the tests' trainable tower (towers.build)
	AtFirst     bool   // Config.TowerAtFirst
}

func init() {
	if v := os.Getenv(jobVar); v != "" {
		if err := jobRank(v); err != nil {
			fmt.Println("rank error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// jobRank runs the job encoded in v on this rank of its world and prints
// the bits of its losses.
func jobRank(v string) error {
	var j rankJob
	if err := json.Unmarshal([]byte(v), &j); err != nil {
		return fmt.Errorf("%s: %w", jobVar, err)
	}
	p, ok := map[string]train.Program{"onef1b": onef1b, "clip": clip, "recompute": recompute, "selective": selective, "marked": marked, "mpipe": mpipe}[j.Program]
	if !ok {
		return fmt.Errorf("%s: no program %q", jobVar, j.Program)
	}
	c := config(p, 1, j.Steps)
	c.StopAfter, c.CheckpointDir, c.Resume = j.Stop, j.Checkpoint, j.Resume
	if j.Tower {
		c.Tower, c.TowerAtFirst = (&towers{}).build, j.AtFirst
	}
	c.World = j.World
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

// jobLosses returns the training losses the ranks of a job printed in
// out (lossesLine, perhaps after a launcher's "[rank N] " prefix), which
// all ranks must report alike.
func jobLosses(t *testing.T, out []byte, ranks int) []float64 {
	t.Helper()
	var lines []string
	for line := range strings.Lines(string(out)) {
		if _, rest, ok := strings.Cut(line, lossesLine); ok {
			lines = append(lines, strings.TrimSpace(rest))
		}
	}
	if len(lines) != ranks {
		t.Fatalf("%d ranks reported their losses, want %d:\n%s", len(lines), ranks, out)
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
