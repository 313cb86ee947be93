//go:build nccl && linux && (amd64 || arm64)

package train_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/launch"
)

// ncclStub builds the NCCL transport's test double
// (runtime/transport/nccl/testdata/ncclstub: the CUDA runtime and NCCL's C
// ABI over host memory and Unix sockets, sums in rank order) with the
// system C compiler into dir, and returns the library's path; it skips
// the test when there is no C compiler.
func ncclStub(t *testing.T, dir string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the NCCL test double: %v", cc, err)
	}
	lib := filepath.Join(dir, "libncclstub.so")
	src := filepath.Join("..", "transport", "nccl", "testdata", "ncclstub")
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", lib, filepath.Join(src, "cudart.c"), filepath.Join(src, "nccl.c"), "-lpthread").CombinedOutput()
	if err != nil {
		t.Fatalf("building the test double: %v\n%s", err, out)
	}
	return lib
}

// ncclJob runs j over an "nccl" world of 4 OS processes (this test
// binary, launch.Local) on the test double, and returns its training
// losses, which every rank must report alike, and the double's log of the
// NCCL calls (one line per group or collective).
func ncclJob(t *testing.T, j rankJob) (losses []float64, calls string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts OS processes")
	}
	dir := t.TempDir()
	lib := ncclStub(t, dir)
	j.World = "nccl"
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "calls")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = launch.Local(ctx, 4, []string{os.Args[0], "-test.run", "^$"}, launch.LocalOptions{
		Stdout: &out, Stderr: &out,
		Env: []string{jobVar + "=" + string(b), "PPGEN_NCCL_LIB=" + lib, "PPGEN_CUDART_LIB=" + lib,
			"NCCLSTUB_DEVICES=4", "NCCLSTUB_DIR=" + dir, "NCCLSTUB_LOG=" + logPath},
	})
	if err != nil {
		t.Fatalf("4 ranks over NCCL (%s): %v\n%s", b, err, out.Bytes())
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	return jobLosses(t, out.Bytes(), 4), string(log)
}

// TestNCCLClip: a -clip program's ALL_REDUCE (the global gradient norm)
// runs over the NCCL transport, on its test double: with the default
// collectives (NCCL's data movement, the sums in member order) the losses
// equal the in-process job's bit for bit; with NCCL's own all-reduce
// (-collectives native; the double sums in rank order, real NCCL in its
// ring's or tree's) within crossTol, as under MPI. The double's log shows
// which NCCL calls carried the reductions.
func TestNCCLClip(t *testing.T) {
	ref := losses(run(t, config(clip, 1, 2*half)))
	for _, c := range []struct {
		coll, call string // the mode, and an NCCL collective that must carry the reductions (member-order: its all-to-all, a group of sends and receives, then an all-gather)
	}{{"member-order", "allgather"}, {"native", "allreduce"}} {
		t.Run(c.coll, func(t *testing.T) {
			got, calls := ncclJob(t, rankJob{Program: "clip", Steps: 2 * half, Collectives: c.coll})
			if !strings.Contains(calls, " "+c.call) {
				t.Errorf("no NCCL %s in the calls the test double logged:\n%s", c.call, calls)
			}
			if c.coll == "member-order" {
				same(t, "losses over NCCL and in process", got, ref)
				return
			}
			d := maxDiff(t, "losses", got, ref)
			if d > crossTol {
				t.Fatalf("losses over NCCL %v differ from the in-process job's %v by %g", got, ref, d)
			}
			t.Logf("losses over NCCL's own all-reduce differ from the in-process job's by at most %g", d)
		})
	}
}
