// Package mpitest starts test binaries under mpirun: the MPI tests of
// runtime/transport/mpi, runtime/collective, examples/mlp and e2e
// re-run their own test binary as the ranks of a job.
package mpitest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Args returns the mpirun command line that starts np copies of args:
// OpenMPI refuses to run as root and more ranks than cores unless told
// (--allow-run-as-root, --oversubscribe); other MPIs get neither.
// PPGEN_MPIRUN names another launcher (mpiexec.mpich for a -tags
// mpi,mpich build beside OpenMPI's mpirun). Without one, the test is
// skipped, saying what to install.
func Args(t testing.TB, np int, args ...string) []string {
	t.Helper()
	name := "mpirun"
	if v := os.Getenv("PPGEN_MPIRUN"); v != "" {
		name = v
	}
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not found: install an MPI (Debian: apt-get install libopenmpi-dev openmpi-bin) to run the MPI tests; CI does", name)
	}
	cmd := []string{path}
	if v, _ := exec.Command(path, "--version").CombinedOutput(); strings.Contains(string(v), "Open MPI") {
		cmd = append(cmd, "--oversubscribe")
		if os.Geteuid() == 0 {
			cmd = append(cmd, "--allow-run-as-root")
		}
	}
	return append(append(cmd, "-np", strconv.Itoa(np)), args...)
}
