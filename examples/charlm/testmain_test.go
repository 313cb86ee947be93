package main

import (
	"os"
	"testing"
)

// exampleDir is the temporary directory buildExample builds the command
// into (empty until a test needs the binary); TestMain removes it after
// the tests, so that `go test` leaves nothing in the temporary directory.
var exampleDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if exampleDir != "" {
		os.RemoveAll(exampleDir)
	}
	os.Exit(code)
}
