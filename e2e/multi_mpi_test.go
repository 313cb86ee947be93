//go:build mpi

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport/mpi"
	"github.com/ppgen/ppgen/runtime/transport/mpi/mpitest"
)

// multiMPIChild is set in the environment of the ranks TestMPIMultiTensor
// starts under mpirun: each then runs one rank of the world.
const multiMPIChild = "PPGEN_E2E_MPI_MULTI_RANK"

// TestMPIMultiTensor runs the generated 1f1b and zbv programs on the
// multi-tensor blocks over MPI, one rank per process under mpirun -np 4,
// buffered and with synchronous sends: each rank's stages, its losses and
// the messages it sent (one per transfer) equal the sequential run's.
func TestMPIMultiTensor(t *testing.T) {
	if name := os.Getenv(multiMPIChild); name != "" {
		multiMPIRank(t, name, os.Getenv("PPGEN_E2E_MPI_SYNC") == "1")
		return
	}
	if testing.Short() {
		t.Skip("starts mpirun jobs")
	}
	for _, name := range []string{"onef1b", "zbv"} {
		for _, sync := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sync=%v", name, sync), func(t *testing.T) {
				n := progByName(t, name).spec.Ranks
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				argv := mpitest.Args(t, n, os.Args[0], "-test.run", "^TestMPIMultiTensor$", "-test.v")
				cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
				cmd.Env = append(os.Environ(), multiMPIChild+"="+name, "PPGEN_E2E_MPI_SYNC="+map[bool]string{false: "0", true: "1"}[sync])
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
				}
				if got := strings.Count(string(out), "multi-tensor MPI rank ok"); got != n {
					t.Fatalf("%d ranks passed, want %d:\n%s", got, n, out)
				}
			})
		}
	}
}

// multiMPIRank runs this process's rank of the generated program name.
func multiMPIRank(t *testing.T, name string, sync bool) {
	p := progByName(t, name)
	sp := p.spec
	tr, err := mpi.New(mpi.Config{Sync: sync, Timeout: 60 * time.Second, Fingerprint: sp.Fingerprint})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	r := tr.Rank()
	if tr.World() != sp.Ranks {
		t.Fatalf("MPI started %d processes, %s has %d ranks", tr.World(), name, sp.Ranks)
	}
	g := newMultiRun(p)
	x := g.exec(t, r, tr)
	defer x.Close()
	fn := rankFns(p, "straight")[r]
	var got [][]float64
	for g.it = range g.iters() {
		if err := pipe.Run(x, fn); err != nil {
			t.Fatalf("rank %d, iteration %d: %v", r, g.it, err)
		}
		if sp.RankOf[sp.Stages-1] == r {
			got = append(got, x.Losses())
		}
	}
	g.check(t, got, r)
	if !t.Failed() {
		fmt.Printf("multi-tensor MPI rank ok: rank %d of %s\n", r, name)
	}
}
