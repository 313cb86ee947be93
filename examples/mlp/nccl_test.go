package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// ncclExample builds the NCCL transport's test double
// (runtime/transport/nccl/testdata/ncclstub, with the system C compiler)
// and the example with -tags nccl, once per test binary run; it returns the
// example and the environment that points the example at the double.
func ncclExample(t *testing.T) (string, []string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the example and starts OS processes")
	}
	if _, err := exec.LookPath(ncclCC()); err != nil {
		t.Skipf("no C compiler (%s) to build the NCCL test double: %v", ncclCC(), err)
	}
	b, err := buildNCCLExample()
	if err != nil {
		t.Fatal(err)
	}
	return b.bin, append(withoutRankEnv(os.Environ()), "PPGEN_NCCL_LIB="+b.stub, "PPGEN_CUDART_LIB="+b.stub, "NCCLSTUB_DEVICES=8")
}

// ncclCC is the C compiler that builds the test double: $CC, else cc.
func ncclCC() string {
	if cc := os.Getenv("CC"); cc != "" {
		return cc
	}
	return "cc"
}

// ncclBuild is what buildNCCLExample built: the example with -tags nccl and
// the test double's shared library.
type ncclBuild struct{ bin, stub string }

// buildNCCLExample builds the test double and the example with -tags nccl
// once per test binary run, into exampleTempDir.
var buildNCCLExample = sync.OnceValues(func() (ncclBuild, error) {
	dir, err := exampleTempDir()
	if err != nil {
		return ncclBuild{}, err
	}
	stub := filepath.Join(dir, "libncclstub.so")
	src := filepath.Join("..", "..", "runtime", "transport", "nccl", "testdata", "ncclstub")
	if out, err := exec.Command(ncclCC(), "-shared", "-fPIC", "-O1", "-o", stub, filepath.Join(src, "cudart.c"), filepath.Join(src, "nccl.c"), "-lpthread").CombinedOutput(); err != nil {
		return ncclBuild{}, fmt.Errorf("building the test double: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "mlp-nccl")
	build := exec.Command("go", "build", "-tags", "nccl", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // purego needs no cgo
	if out, err := build.CombinedOutput(); err != nil {
		return ncclBuild{}, fmt.Errorf("go build -tags nccl: %v\n%s", err, out)
	}
	return ncclBuild{bin: bin, stub: stub}, nil
})

// TestNCCLMatchesSequential: -transport nccl over the NCCL transport's test
// double: 4 OS processes train exactly as sequential training.
func TestNCCLMatchesSequential(t *testing.T) {
	bin, env := ncclExample(t)
	for _, name := range []string{"1f1b", "zbv", "mpipe"} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin, "-transport", "nccl", "-check", "-schedule", name, "-steps", "3")
			cmd.Env = env
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

// TestNCCLDPMatchesSequential: -transport nccl -dp 2 over the test double:
// 8 OS processes (4 pipeline ranks × 2 replicas) train as sequential
// training on the whole global batch, their DP groups' collectives NCCL's
// (every rank says so): FSDP (1f1b-fsdp-swap) with member-order sums (the
// default: NCCL's all-to-all and all-gather), and plain data parallelism
// on 1f1b with NCCL's own all-reduce (-collectives native).
func TestNCCLDPMatchesSequential(t *testing.T) {
	bin, env := ncclExample(t)
	for _, c := range []struct {
		schedule, coll string
	}{{"1f1b-fsdp-swap", "member-order"}, {"1f1b", "native"}} {
		t.Run(c.schedule, func(t *testing.T) {
			cmd := exec.Command(bin, "-transport", "nccl", "-dp", "2", "-check", "-schedule", c.schedule, "-collectives", c.coll, "-steps", "3")
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if got := strings.Count(string(out), "check: max relative difference"); got != 8 {
				t.Errorf("%d ranks checked, want 8:\n%s", got, out)
			}
			native := "collectives are the transport's own (-collectives " + c.coll + ")"
			if got := strings.Count(string(out), native); got != 8 {
				t.Errorf("%d ranks ran NCCL's collectives (%q), want 8:\n%s", got, native, out)
			}
		})
	}
}

// TestNCCLNeedsTag: without -tags nccl, -transport nccl says how to build
// it and exits 2, before it launches any rank.
func TestNCCLNeedsTag(t *testing.T) {
	bin := exampleBinary(t)
	for _, args := range [][]string{{"-transport", "nccl", "-steps", "1"}, {"-transport", "nccl", "-dp", "2"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = withoutRankEnv(os.Environ())
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("%v: %v, want exit status 2\n%s", args, err, out)
		}
		if want := "mlp: -transport nccl: ppgen built without NCCL: rebuild with -tags nccl (no cgo: NCCL and the CUDA runtime are loaded at run time)\n"; string(out) != want {
			t.Errorf("%v: output %q, want %q", args, out, want)
		}
	}
}
