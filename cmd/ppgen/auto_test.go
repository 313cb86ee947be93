package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAutoCommands: -schedule auto through sim (the candidate table, the
// choice marked), gen (the choice recorded in Spec, the flags in the header,
// so that check regenerates the same file) and the usage errors of -mem and
// -cost with a fixed schedule.
func TestAutoCommands(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"sim", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "3", "-cost", "F=1,B=2,W=1,overlap=1"}, &stdout, &stderr); code != 0 {
		t.Fatalf("sim: exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "CANDIDATE") || strings.Count(out, "\n* ") != 1 || !strings.Contains(out, "over the limit 3") || !strings.Contains(out, "auto: ") {
		t.Errorf("sim output:\n%s", out)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "schedule_gen.go")
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"gen", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "3", "-cost", "F=1,B=2,W=1,overlap=1", "-package", "p", "-o", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr.String())
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "// ppgen gen -cost F=1,B=2,W=1,overlap=1 -mem 3 -micro 8 -package p -ranks 4 -schedule auto\n") ||
		strings.Contains(string(src), `Schedule:    "auto"`) || !strings.Contains(stderr.String(), "the best of") {
		t.Errorf("gen: stderr %s\nheader and spec:\n%s", stderr.String(), string(src)[:min(len(src), 900)])
	}
	stderr.Reset()
	if code := run([]string{"check", path}, &stdout, &stderr); code != 0 {
		t.Errorf("check of the auto file: exit %d: %s", code, stderr.String())
	}

	for _, args := range [][]string{
		{"gen", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-mem", "3", "-o", "-"},
		{"show", "-schedule", "zbv", "-ranks", "4", "-micro", "8", "-cost", "F=1"},
		{"gen", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "-1", "-o", "-"},
	} {
		stderr.Reset()
		if code := run(args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "-mem") {
			t.Errorf("%v: exit %d, want 2 and a word on -mem: %s", args, code, stderr.String())
		}
	}
	stderr.Reset()
	if code := run([]string{"gen", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "0.5", "-o", "-"}, &stdout, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "no schedule fits the activation memory limit 0.5") {
		t.Errorf("-mem 0.5: exit %d: %s", code, stderr.String())
	}
}
