package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDualPipeVerifySimGen: dualpipe (two model copies) lowers, verifies,
// simulates and generates (Spec.Copies = 2), and the file passes check.
func TestDualPipeVerifySimGen(t *testing.T) {
	out := cliMust(t, "verify", "-schedule", "dualpipe", "-ranks", "4", "-micro", "8")
	if !strings.HasPrefix(out, "ok: 4 ranks, 8 stages, 8 micro-batches") {
		t.Errorf("verify: %q", out)
	}
	if out := cliMust(t, "sim", "-schedule", "dualpipe", "-ranks", "4", "-micro", "8"); !strings.Contains(out, "makespan") {
		t.Errorf("sim: %q", out)
	}
	path := filepath.Join(mkdirTemp(t, "sched"), "schedule_gen.go")
	code, _, stderr := cliRun(t, "gen", "-schedule", "dualpipe", "-ranks", "4", "-micro", "8", "-o", path)
	if code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr)
	}
	if code, _, stderr := cliRun(t, "check", path); code != 0 {
		t.Errorf("check: exit %d: %s", code, stderr)
	}
}
