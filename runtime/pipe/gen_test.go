package pipe_test

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite fakegen_test.go")

func lowerAll() []prog {
	var ps []prog
	for _, d := range progDefs {
		ps = append(ps, lower(d))
	}
	return ps
}

// TestFakeGenUpToDate checks that the straight-line programs in
// fakegen_test.go are exactly the lowered programs the interpreter tests run.
func TestFakeGenUpToDate(t *testing.T) {
	want := emit(lowerAll())
	if *update {
		if err := os.WriteFile("fakegen_test.go", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile("fakegen_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("fakegen_test.go is stale: go test ./runtime/pipe -run TestFakeGenUpToDate -update")
	}
}
