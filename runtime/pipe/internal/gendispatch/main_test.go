package main

import (
	"bytes"
	"os"
	"testing"
)

// TestUpToDate fails while runtime/pipe's kinds_gen.go is not what abi's
// kind table gives: run `go generate ./runtime/pipe`.
func TestUpToDate(t *testing.T) {
	want, err := source()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../kinds_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("runtime/pipe/kinds_gen.go is stale: run go generate ./runtime/pipe")
	}
}
