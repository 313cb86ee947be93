package main

import (
	"io"
	"os"
	"testing"
)

func TestZZProfAuto(t *testing.T) {
	if os.Getenv("ZZPROF") == "" {
		t.Skip()
	}
	args := []string{"sim", "-schedule", "auto", "-ranks", "2", "-micro", "4", "-model", "../../examples/models/tiny.json", "-recompute", "full", "-mem", "3"}
	if rc := run(args, os.Stdout, io.Discard); rc != 0 {
		t.Fatal(rc)
	}
}
