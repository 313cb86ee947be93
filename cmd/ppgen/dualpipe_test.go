package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDualPipeVerifySimNotGen: dualpipe (two model copies) lowers, verifies
// and simulates, but `ppgen gen` refuses it (runtime/pipe has no gradient
// all-reduce between the copies), exits 2 and writes nothing.
func TestDualPipeVerifySimNotGen(t *testing.T) {
	out := cliMust(t, "verify", "-schedule", "dualpipe", "-ranks", "4", "-micro", "8")
	if !strings.HasPrefix(out, "ok: 4 ranks, 8 stages, 8 micro-batches") {
		t.Errorf("verify: %q", out)
	}
	if out := cliMust(t, "sim", "-schedule", "dualpipe", "-ranks", "4", "-micro", "8"); !strings.Contains(out, "makespan") {
		t.Errorf("sim: %q", out)
	}
	path := filepath.Join(t.TempDir(), "sched", "schedule_gen.go")
	for _, o := range []string{path, "-"} {
		code, stdout, stderr := cliRun(t, "gen", "-schedule", "dualpipe", "-ranks", "4", "-micro", "8", "-o", o)
		want := "dualpipe's two model copies need a gradient all-reduce between ranks r and P-1-r that runtime/pipe does not have yet; ppgen verify and ppgen sim work"
		if code != 2 || stdout != "" || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("gen -o %s: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", o, code, stdout, stderr, want)
		}
	}
	cliNoFile(t, path)
}
