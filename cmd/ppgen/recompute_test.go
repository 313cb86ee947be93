package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenRecompute: `ppgen gen -recompute full` writes a program with
// RECOMPUTE calls and Spec.Recompute, records the flag so that `ppgen
// check` regenerates it byte for byte, and `sim` and `verify` take the
// flag too; a bad policy is a usage error naming the choices.
func TestGenRecompute(t *testing.T) {
	path := filepath.Join(t.TempDir(), "schedule_gen.go")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"gen", "-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-recompute", "full:0@idle", "-package", "p", "-o", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr.String())
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-recompute full:0@idle", "Recompute:   []int{0},", "x.Recompute(0x0000_0000_"} {
		if !bytes.Contains(src, []byte(want)) {
			t.Errorf("the generated file lacks %q", want)
		}
	}
	if bytes.Contains(src, []byte("x.Recompute(0x0001_")) {
		t.Errorf("stage 1 recomputes, but only stage 0 should")
	}
	if code := run([]string{"check", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("check: exit %d: %s", code, stderr.String())
	}
	for _, cmd := range []string{"sim", "verify"} {
		stdout.Reset()
		if code := run([]string{cmd, "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-recompute", "full"}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s", cmd, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "peak activations per rank [1 1 1 1]") {
			t.Errorf("%s -recompute full: %s; want one live chunk per rank", cmd, stdout.String())
		}
	}
	// Selective: the Spec carries the shares, check regenerates the file,
	// and sim and verify print the fractional peaks.
	if code := run([]string{"gen", "-schedule", "1f1b", "-ranks", "2", "-micro", "4", "-recompute", "selective:0.5", "-package", "p", "-o", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("gen selective: exit %d: %s", code, stderr.String())
	}
	if src, err = os.ReadFile(path); err != nil || !bytes.Contains(src, []byte("RecomputeShare: []float64{0.5, 0.5},")) {
		t.Errorf("the selective file lacks RecomputeShare (%v)", err)
	}
	if code := run([]string{"check", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("check selective: exit %d: %s", code, stderr.String())
	}
	for _, cmd := range []string{"sim", "verify"} {
		stdout.Reset()
		if code := run([]string{cmd, "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-recompute", "selective:0.5"}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s", cmd, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "peak activations per rank [3 2 2 1] (live chunks [2.5 2 1.5 1])") {
			t.Errorf("%s -recompute selective:0.5: %s; want the live chunks 2.5 2 1.5 1", cmd, stdout.String())
		}
	}
	stderr.Reset()
	if code := run([]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-recompute", "half"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "want none, full") {
		t.Errorf("-recompute half: exit %d, %q; want 2 and the choices", code, stderr.String())
	}
}
