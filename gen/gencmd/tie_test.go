package gencmd

import (
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestTieFlag: -tie parses one tie or a list, repeats, normalizes, records
// itself in the invocation as a list Set reads back, and names the bad
// value and the fix.
func TestTieFlag(t *testing.T) {
	r, err := Parse([]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-tie", "3:0", "-tie", "1:2"}, Env{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []ir.Tie{{A: 0, B: 3}, {A: 1, B: 2}}; len(r.Ties) != 2 || r.Ties[0] != want[0] || r.Ties[1] != want[1] {
		t.Errorf("Ties = %v; want %v", r.Ties, want)
	}
	if !strings.Contains(r.Invocation, "-tie 0:3,1:2") {
		t.Errorf("invocation %q does not record -tie 0:3,1:2", r.Invocation)
	}
	again, err := Parse([]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-tie", "0:3,1:2"}, Env{})
	if err != nil || again.Ties.String() != r.Ties.String() {
		t.Errorf("the recorded list reads back as %v (%v); want %v", again.Ties, err, r.Ties)
	}
	opt, err := r.LowerOptions()
	if err != nil || len(opt.Passes.Ties) != 2 {
		t.Errorf("LowerOptions: ties %v, %v", opt.Passes.Ties, err)
	}
	for _, tc := range []struct{ value, words string }{
		{"3:3", "tied to itself"},
		{"0", "two stages A:B"},
		{"a:b", `stage "a" is not an integer`},
		{"-1:2", "stage -1 is out of range; stages are numbered 0..S-1"},
		{"0:99999999999999999999", "stage 99999999999999999999 is out of range; stages are numbered 0..S-1 (S at most 65535), so name two in 0..65534"},
		{"70000:1", "stage 70000 is out of range"},
		{"0:3,", "two stages A:B"},
		{"0:1,a", `tie "a": want two stages A:B`}, // several ties: the bad one is named
	} {
		_, err := Parse([]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-tie", tc.value}, Env{})
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.words) || !strings.Contains(err.Error(), "-tie") {
			t.Errorf("-tie %s: %v; want a usage error of -tie saying %q", tc.value, err, tc.words)
		}
		if err != nil && strings.Count(err.Error(), `"`+tc.value+`"`) != 1 {
			t.Errorf("-tie %s: %v; want the value named once", tc.value, err)
		}
	}
	// auto chooses the stage count: a tie cannot name its stages.
	if r, err := Parse([]string{"-schedule", "auto", "-ranks", "4", "-micro", "4", "-tie", "0:3"}, Env{}); err != nil {
		t.Fatal(err)
	} else if _, err := r.LowerOptions(); err == nil || !strings.Contains(err.Error(), "auto") {
		t.Errorf("-tie with -schedule auto: %v; want a usage error", err)
	}
	// The range is the schedule's: 4 stages.
	r, err = Parse([]string{"-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-tie", "0:4", "-package", "x"}, Env{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lower(); err == nil || !strings.Contains(err.Error(), "0:4") || !strings.Contains(err.Error(), "-tie 0:3") {
		t.Errorf("-tie 0:4 on 4 stages: %v; want the tie and the fix -tie 0:3 named", err)
	}
}
