// Package long is the switch between the default test suite and the long
// one: the search-quality tables, long sweeps and every test whose verdict
// depends on wall-clock speed run only when PPGEN_LONG=1.
//
// The default suite (go test ./...) stays within a few minutes on 2 cores
// under load; CI runs it, then the long suite as its own step:
//
//	PPGEN_LONG=1 go test ./...
//
// An environment variable rather than a test flag, so that one command
// reaches every package, including those that define no flags.
package long

import (
	"os"
	"testing"
)

// Var is the environment variable that turns the long suite on.
const Var = "PPGEN_LONG"

// Enabled reports whether the long suite runs (PPGEN_LONG=1).
func Enabled() bool { return os.Getenv(Var) == "1" }

// Skip skips t unless the long suite runs, saying what t is and how to run it.
func Skip(t testing.TB, what string) {
	t.Helper()
	if !Enabled() {
		t.Skipf("%s: long test, run with %s=1", what, Var)
	}
}
