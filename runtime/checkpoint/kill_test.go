package checkpoint

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// killChildEnv makes the test binary a child that saves checkpoints into
// the directory it names, one after another, until it is killed.
const killChildEnv = "PPGEN_CHECKPOINT_KILL_CHILD"

// killLayout is the child's layout: 4 ranks of 2 layers each.
var killLayout = plainLayout([]int{0, 2, 4, 6, 8}, 1, false)

// killShards is what the child saves at step: model(8, step) and a blob
// of 1 MiB of the step's low byte per rank, so that a save takes a while.
func killShards(t testing.TB, step int64) []*Shard {
	shards := shardsOf(t, model(8, uint64(step)), killLayout)
	for _, s := range shards {
		s.Blobs["pad"] = bytes.Repeat([]byte{byte(step)}, 1<<20)
	}
	return shards
}

// TestSaveKillChild is the child's body; it does nothing in a normal run.
func TestSaveKillChild(t *testing.T) {
	dir := os.Getenv(killChildEnv)
	if dir == "" {
		t.Skip("the child of TestSaveKilledBySIGKILL")
	}
	step := int64(1)
	if m, err := ReadManifest(dir); err == nil {
		step = m.Step + 1
	}
	for ; ; step++ {
		saveAll(t, dir, killLayout, step, killShards(t, step))
	}
}

// TestSaveKilledBySIGKILL kills a process saving checkpoints with SIGKILL
// at random moments: each time the directory holds a whole checkpoint,
// the last one saved, that loads and verifies.
func TestSaveKilledBySIGKILL(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skip("needs SIGKILL and a child process")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	last := int64(0)
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSaveKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for a save newer than the last round's, then kill at a
		// random moment of the saves that follow.
		deadline := time.Now().Add(60 * time.Second)
		for {
			if m, err := ReadManifest(dir); err == nil && m.Step > last {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("round %d: the child saved nothing new in 60 s", round)
			}
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()

		c, err := Open(dir)
		if err != nil {
			t.Fatalf("round %d: after SIGKILL: %v", round, err)
		}
		step := c.Manifest.Step
		if step <= last {
			t.Fatalf("round %d: step %d, not after %d", round, step, last)
		}
		last = step
		got, err := c.Layers([]int{0, 1, 2, 3, 4, 5, 6, 7}, 0)
		if err != nil {
			t.Fatalf("round %d: after SIGKILL: %v", round, err)
		}
		equalParams(t, got, model(8, uint64(step)))
		for r := range c.Manifest.Shards {
			s, err := c.ReadShard(r, Filter{})
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if !bytes.Equal(s.Blobs["pad"], killShards(t, step)[r].Blobs["pad"]) {
				t.Fatalf("round %d: rank %d's blob is not step %d's", round, r, step)
			}
		}
		ents, _ := os.ReadDir(dir)
		t.Logf("round %d: killed after step %d, %d files of an unfinished save left; it loads", round, step, len(ents)-1-len(c.Manifest.Shards))
	}
}
