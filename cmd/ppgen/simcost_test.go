package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestZeroCostPeaks: steps of zero length still hold their chunks, so sim
// with all-zero costs reports the live chunks verify counts, and -mem
// refuses what is over it, under -cost and under a -model alike.
func TestZeroCostPeaks(t *testing.T) {
	peaks := regexp.MustCompile(`peak activations per rank \[[0-9 ]*\]`)
	for _, tc := range []struct{ schedule, ranks, micro string }{
		{"gpipe", "2", "8"},
		{"1f1b", "4", "8"},
		{"zbv", "4", "8"},
		{"interleaved", "4", "8"},
	} {
		args := []string{"-schedule", tc.schedule, "-ranks", tc.ranks, "-micro", tc.micro}
		sim := peaks.FindString(cliMust(t, append([]string{"sim", "-cost", "F=0,B=0,W=0"}, args...)...))
		ver := peaks.FindString(cliMust(t, append([]string{"verify"}, args...)...))
		if sim == "" || sim != ver {
			t.Errorf("%s P=%s M=%s, all costs 0: sim %q, verify %q", tc.schedule, tc.ranks, tc.micro, sim, ver)
		}
	}

	model := filepath.Join(t.TempDir(), "free.json")
	if err := os.WriteFile(model, []byte(`{"layers": [
  {"name": "a", "F": 0, "B": 0, "act": 1, "params": 0},
  {"name": "b", "F": 0, "B": 0, "act": 1, "params": 0}
]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		// 0.2: below even a chunk of V = 4 (0.25 of a share), which
		// recomputing every stage brings each rank to
		{"sim", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-cost", "F=0,B=0,W=0", "-mem", "0.2"},
		// -recompute none: partition would otherwise recompute (at no
		// cost here) and fit
		{"partition", "-model", model, "-ranks", "2", "-mem", "1", "-recompute", "none"},
	} {
		if code, stdout, stderr := cliRun(t, args...); code != 2 || !strings.Contains(stderr, "raise") {
			t.Errorf("%v: exit %d, want 2 and a word on raising the limit\nstdout:\n%s\nstderr %s", args, code, stdout, stderr)
		}
	}
}

// TestCostBackwardParts: -cost keeps B = I + W, as a -model layer does: a
// key of the three not given is derived from the other two, so every
// family is charged the same backward, and three that disagree are refused
// naming the values and the fix.
func TestCostBackwardParts(t *testing.T) {
	for _, tc := range []struct {
		cost string
		want string // in stdout
	}{
		{"I=5", "cost F=1,B=6,I=5,W=1,"},
		{"B=3,I=1", "cost F=1,B=3,I=1,W=2,"},
		{"I=0.5,W=1.5", "cost F=1,B=2,I=0.5,W=1.5,"},
		{"B=4,I=3,W=1", "cost F=1,B=4,I=3,W=1,"},
	} {
		out := cliMust(t, "sim", "-compare", "1f1b,zbv", "-ranks", "4", "-micro", "8", "-cost", tc.cost)
		if !strings.Contains(out, tc.want) {
			t.Errorf("-cost %s: want %q in\n%s", tc.cost, tc.want, out)
		}
	}
	for _, tc := range []struct{ cost, want string }{
		{"B=4,I=1,W=1", "stage 0: B=4 but I + W = 1 + 1 = 2 (B is the full backward, I then W); give B=2, or leave one of B, I, W out"},
		{"B=1,I=2", "stage 0: W = B − I = 1 − 2 < 0: I=2 exceeds B=1; give I ≤ B, or give W"},
	} {
		for _, args := range [][]string{
			{"sim", "-schedule", "zbv", "-ranks", "4", "-micro", "8", "-cost", tc.cost},
			{"sim", "-compare", "1f1b,zbv", "-ranks", "4", "-micro", "8", "-cost", tc.cost},
			{"gen", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-cost", tc.cost, "-o", "-"},
		} {
			if code, _, stderr := cliRun(t, args...); code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("%v: exit %d, want 2 and %q; stderr %s", args, code, tc.want, stderr)
			}
		}
	}
}
