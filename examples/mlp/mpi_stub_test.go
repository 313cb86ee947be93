//go:build !mpi

package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestMPIWithoutTag: a binary built without -tags mpi refuses -transport
// mpi with the rebuild hint and exit status 2.
func TestMPIWithoutTag(t *testing.T) {
	bin := exampleBinary(t)
	for _, args := range [][]string{{"-transport", "mpi"}, {"-transport", "mpi", "-mpi-sync"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("%v: %v, want exit status 2\n%s", args, err, out)
		}
		if want := "mlp: -transport mpi: ppgen built without MPI: rebuild with -tags mpi (needs libopenmpi-dev or an MPICH)\n"; string(out) != want {
			t.Fatalf("%v: output %q, want %q", args, out, want)
		}
	}
	out, err := exec.Command(bin, "-mpi-sync").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-mpi-sync needs -transport mpi (not inproc)") {
		t.Fatalf("-mpi-sync alone: %v\n%s", err, out)
	}
}
