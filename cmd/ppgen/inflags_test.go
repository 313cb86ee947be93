package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInFlags: with -in, the flags the file's program leaves nothing to do
// are refused (exit 2, nothing written) rather than taken silently and
// recorded in a generated header: -ranks, -micro, -virtual and -placement
// always, and the options of the passes that rewrite a compute order when
// the file is already lowered. A compute-only file takes them, and a
// lowered one still takes -batch and -tie, which apply to it.
func TestInFlags(t *testing.T) {
	dir := t.TempDir()
	lowered := filepath.Join(dir, "lowered.txt")
	compute := filepath.Join(dir, "compute.txt")
	if err := os.WriteFile(lowered, []byte(cliMust(t, "show", "-schedule", "1f1b", "-ranks", "2", "-micro", "2")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(compute, []byte(cliMust(t, "show", "-schedule", "1f1b", "-ranks", "2", "-micro", "2", "-compute-only")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "x_gen.go")
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"gen", "-in", lowered, "-forward-only", "-package", "x", "-o", out}, 2, "-forward-only: -in " + lowered + " is already lowered (it has transfers), so it has no compute order for them to rewrite"},
		{[]string{"verify", "-in", lowered, "-fsdp", "1", "-split"}, 2, "-split, -fsdp: -in"},
		{[]string{"verify", "-in", lowered, "-swap", "2"}, 2, "-swap: -in"},
		{[]string{"verify", "-in", lowered, "-ship-labels"}, 2, "-ship-labels: -in"},
		{[]string{"verify", "-in", lowered, "-comm-order", "eager"}, 2, "-comm-order: -in"},
		{[]string{"verify", "-in", lowered, "-ranks", "77", "-micro", "5"}, 2, "-ranks, -micro: -in " + lowered + " gives the ranks, stages and micro-batches itself; drop -ranks, -micro"},
		{[]string{"gen", "-in", compute, "-placement", "1,0", "-package", "x", "-o", out}, 2, "-placement: -in"},
		{[]string{"verify", "-in", compute, "-virtual", "2"}, 2, "-virtual: -in"},
		{[]string{"verify", "-in", lowered}, 0, ""},
		{[]string{"verify", "-in", lowered, "-batch"}, 0, ""},
		{[]string{"verify", "-in", lowered, "-comm-order", "timed"}, 0, ""}, // the default
		{[]string{"verify", "-in", compute, "-split", "-comm-order", "eager"}, 0, ""},
	} {
		code, _, errs := cliRun(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.msg) {
			t.Errorf("ppgen %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, errs, tc.code, tc.msg)
		}
		if _, err := os.Stat(out); tc.code != 0 && err == nil {
			t.Errorf("ppgen %s: wrote %s", strings.Join(tc.args, " "), out)
		}
	}
}
