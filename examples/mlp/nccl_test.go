package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNCCLMatchesSequential: -transport nccl, built with -tags nccl, over
// the NCCL transport's test double (runtime/transport/nccl/testdata/ncclstub,
// built with the system C compiler): 4 OS processes train exactly as
// sequential training.
func TestNCCLMatchesSequential(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example and starts OS processes")
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the NCCL test double: %v", cc, err)
	}
	dir := t.TempDir()
	stub := filepath.Join(dir, "libncclstub.so")
	src := filepath.Join("..", "..", "runtime", "transport", "nccl", "testdata", "ncclstub")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", stub, filepath.Join(src, "cudart.c"), filepath.Join(src, "nccl.c"), "-lpthread").CombinedOutput(); err != nil {
		t.Fatalf("building the test double: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "mlp")
	build := exec.Command("go", "build", "-tags", "nccl", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // purego needs no cgo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags nccl: %v\n%s", err, out)
	}
	for _, name := range []string{"1f1b", "zbv", "mpipe"} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin, "-transport", "nccl", "-check", "-schedule", name, "-steps", "3")
			cmd.Env = append(withoutRankEnv(os.Environ()), "PPGEN_NCCL_LIB="+stub, "PPGEN_CUDART_LIB="+stub)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if got := strings.Count(string(out), "check: max relative difference"); got != 4 {
				t.Errorf("%d ranks checked, want 4:\n%s", got, out)
			}
		})
	}
}

// TestNCCLNeedsTag: without -tags nccl, -transport nccl says how to build it.
func TestNCCLNeedsTag(t *testing.T) {
	bin := exampleBinary(t)
	cmd := exec.Command(bin, "-transport", "nccl", "-steps", "1")
	cmd.Env = withoutRankEnv(os.Environ())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "built without the NCCL transport; build it with go build -tags nccl ./examples/mlp") {
		t.Errorf("err %v, output:\n%s", err, out)
	}
}
