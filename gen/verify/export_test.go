package verify

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain runs every test of the package with the walk's fast path
// cross-checked (crossCheck: preErr asked wherever its precondition test
// passed, its waits compared with waitsAt's), and fails
// the run when preErr found fault there. Benchmarks run without it.
func TestMain(m *testing.M) {
	flag.Parse()
	if b := flag.Lookup("test.bench"); b != nil && b.Value.String() != "" {
		os.Exit(m.Run())
	}
	crossCheck = true
	code := m.Run()
	crossCheckMu.Lock()
	faults := crossCheckFaults
	crossCheckMu.Unlock()
	for _, f := range faults {
		fmt.Fprintln(os.Stderr, "verify's fast path:", f)
	}
	if len(faults) > 0 && code == 0 {
		code = 1
	}
	os.Exit(code)
}
