package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestReport: the report of a schedule holds its verification, its
// simulated makespan, one row per rank, the SVG timeline and the program,
// and is the same bytes on a rerun.
func TestReport(t *testing.T) {
	args := []string{"report", "-schedule", "1f1b", "-ranks", "3", "-micro", "4", "-cost", "comm=0.1", "-o", "-"}
	var out, errs bytes.Buffer
	if code := run(args, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	s := out.String()
	for _, want := range []string{
		"<title>1f1b, P=3, M=4</title>",
		`<span class="ok">verified</span>`,
		"makespan <b>",
		"<tr><td>0</td>", "<tr><td>1</td>", "<tr><td>2</td>",
		"<svg", "rank 2: 2DATA_LOAD0",
		"comm=0.1",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if n := strings.Count(s, "<tr><td>"); n != 3 {
		t.Errorf("%d rank rows, want 3", n)
	}
	var again bytes.Buffer
	if code := run(args, &again, &errs); code != 0 || again.String() != s {
		t.Errorf("rerun differs (exit %d)", code)
	}
	if code := run([]string{"report", "-schedule", "1f1b", "-ranks", "2", "-micro", "2"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "missing -o FILE.html") {
		t.Errorf("without -o: exit %d, %s", code, errs.String())
	}
}
