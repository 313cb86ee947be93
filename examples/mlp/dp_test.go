package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/examples/internal/compare"
	"github.com/ppgen/ppgen/runtime/mesh"
	"github.com/ppgen/ppgen/runtime/nn"
)

// TestDPInProcMatchesSequential: -dp N in-process, FSDP (1f1b-fsdp-swap) and
// plain data parallelism (1f1b; with ties: TIE_GRAD in each replica, then
// the all-reduce), equals sequential training on the whole
// global batch within the tolerances (float64 1e-12, float32 1e-5).
func TestDPInProcMatchesSequential(t *testing.T) {
	for _, name := range []string{"1f1b-fsdp-swap", "1f1b", "interleaved", "1f1b-tie", "zbv-tie"} {
		for _, dtype := range []string{"float64", "float32"} {
			for _, dp := range []int{2, 3} {
				t.Run(fmt.Sprintf("%s/%s/dp%d", name, dtype, dp), func(t *testing.T) {
					var out bytes.Buffer
					o := options{schedule: name, transport: "inproc", steps: 3, check: true, dtype: dtype, lr: 0.1, seed: 7, dp: dp}
					if err := run(o, &out, slog.New(slog.DiscardHandler)); err != nil {
						t.Fatalf("%v\n%s", err, out.String())
					}
					if !strings.Contains(out.String(), "check: max relative difference") {
						t.Fatalf("no check line:\n%s", out.String())
					}
				})
			}
		}
	}
}

// TestDPReferenceIsSequential: the -check reference (train.Reference) sums
// its gradients per replica block (the association data parallelism
// computes); plain sequential training, one sum over all micro-batches,
// gives the same parameters within 1e-12 in float64, so the blocked
// reference hides no difference. And training with -dp 2 differs from
// training a single replica on half the batch, so the check can fail.
func TestDPReferenceIsSequential(t *testing.T) {
	o := options{schedule: "1f1b", transport: "inproc", steps: 3, dtype: "float64", lr: 0.1, seed: 7, dp: 2}
	sc := catalog[o.schedule]
	m, _ := mesh.New(sc.Spec.Ranks, o.dp)
	res, err := job(o, sc, m, &bytes.Buffer{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := buildStages(stagesPerCopy(sc.Spec), tensor.Float64, o.seed, o.widen())
	if err != nil {
		t.Fatal(err)
	}
	micro := sc.Spec.Micro * o.dp
	if _, err := trainSequential(plain, newBatches(tensor.Float64, o.seed, micro), &nn.SGD{LR: o.lr}, nn.MSE{Scale: 1 / float64(micro)}, o.steps); err != nil {
		t.Fatal(err)
	}
	half, _, err := sequentialReference(o, sc.Spec, tensor.Float64)
	if err != nil {
		t.Fatal(err)
	}
	byLayer := func(stages []*nn.Sequential) map[int][]*nn.Param {
		out := map[int][]*nn.Param{}
		for s, st := range stages {
			out[s] = st.Params()
		}
		return out
	}
	if d, err := compare.Layers(res.Layers, byLayer(plain)); err != nil || d > 1e-12 {
		t.Errorf("%.3g (%v) from plain sequential training on the global batch", d, err)
	}
	if d, _ := compare.Layers(res.Layers, byLayer(half)); d < 1e-6 {
		t.Errorf("only %.3g from training on one replica's half of the batch; the check could not see a lost replica", d)
	}
}

// TestDPMemory: with FSDP at DP = 2 each rank keeps half of its stages'
// parameters and gradients (padded to whole elements), plain data
// parallelism all of them; the figures come from the model's layer sizes.
func TestDPMemory(t *testing.T) {
	// Elements per stage of the 4-stage model: 2 blocks each (Linear 16→32
	// or 32→32, then Tanh), the last with the Linear 32→4.
	l16, l32, out := 16*32+32, 32*32+32, 32*4+4
	elems := []int{l16 + l32, 2 * l32, 2 * l32, 2*l32 + out}
	for _, c := range []struct {
		schedule string
		dtype    string
		shard    bool
	}{{"1f1b-fsdp-swap", "float64", true}, {"1f1b", "float64", false}, {"1f1b-fsdp-swap", "float32", true}} {
		t.Run(c.schedule+"/"+c.dtype, func(t *testing.T) {
			o := options{schedule: c.schedule, transport: "inproc", steps: 2, dtype: c.dtype, lr: 0.1, seed: 7, dp: 2}
			sc := catalog[o.schedule]
			m, _ := mesh.New(sc.Spec.Ranks, o.dp)
			res, err := job(o, sc, m, &bytes.Buffer{}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			es := int64(8)
			if c.dtype == "float32" {
				es = 4
			}
			if len(res.Ranks) != m.World() {
				t.Fatalf("%d ranks reported, want %d", len(res.Ranks), m.World())
			}
			for w, r := range res.Ranks {
				want := int64(elems[r.Pipe]) * es
				peak := 0
				if c.shard {
					want = int64((elems[r.Pipe]+1)/2) * es
					peak = 1 // one stage per rank; the verifier's FSDP peak of the schedule (e2e/ checks it)
				}
				st := r.Memory
				if st.ParamBytes != want || st.GradBytes != want || st.OptimBytes != 0 || st.PeakGathered != peak {
					t.Errorf("rank %d: %v; want parameters = gradients = %d bytes, no optimizer state (SGD without momentum), peak %d gathered", w, st, want, peak)
				}
			}
		})
	}
}

// TestDPFlags: bad -dp uses are refused with what to change.
func TestDPFlags(t *testing.T) {
	for _, c := range []struct {
		o    options
		want string
	}{
		{options{schedule: "1f1b", transport: "inproc", dp: 0, dtype: "float64"}, "-dp 0: mesh: 4 pipeline ranks × 0 replicas; want both at least 1"},
		{options{schedule: "1f1b", transport: "inproc", dp: 2, dtype: "float64", trace: "x.json"}, "-trace is not recorded with -dp 2"},
		{options{schedule: "1f1b", transport: "carrier-pigeon", dp: 2, dtype: "float64"}, `unknown transport "carrier-pigeon": want inproc, tcp, mpi or nccl`},
		{options{schedule: "1f1b", transport: "inproc", dp: 2, dtype: "float64", coll: "telepathy"}, `collectives "telepathy": want member-order`},
		{options{schedule: "nope", transport: "inproc", dp: 2}, `-schedule "nope" is not compiled in`},
	} {
		err := run(c.o, &bytes.Buffer{}, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", c.o, err, c.want)
		}
	}
}

// TestDPOverTCP: -dp 2 -transport tcp launches ranks × 2 = 8 OS processes
// that train exactly as sequential training on the global batch.
func TestDPOverTCP(t *testing.T) {
	bin := exampleBinary(t)
	for _, name := range []string{"1f1b-fsdp-swap", "1f1b"} {
		for _, dtype := range []string{"float64", "float32"} {
			t.Run(name+"/"+dtype, func(t *testing.T) {
				cmd := exec.Command(bin, "-transport", "tcp", "-dp", "2", "-check", "-schedule", name, "-steps", "3", "-dtype", dtype)
				cmd.Env = withoutRankEnv(os.Environ())
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				if got := strings.Count(string(out), "check: max relative difference"); got != 8 {
					t.Fatalf("%d ranks reported a check, want 8:\n%s", got, out)
				}
				if got := strings.Count(string(out), "memory: resident"); got != 8 {
					t.Fatalf("%d ranks reported their memory, want 8:\n%s", got, out)
				}
			})
		}
	}
}

// TestDPKilledRankIsNamed: killing one rank of an 8-process -dp 2 run makes
// every other rank, in its pipeline and in the other one, exit with an
// error naming it within 10 s.
func TestDPKilledRankIsNamed(t *testing.T) {
	bin := exampleBinary(t)
	flags := []string{"-schedule", "1f1b-fsdp-swap", "-dp", "2", "-steps", "100000", "-step-delay", "5ms"}
	args, tokens := make([][]string, 8), make([]string, 8)
	for r := range args {
		args[r], tokens[r] = flags, mlpToken
	}
	procs := startRanks(t, bin, args, tokens)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(procs[0].stdout.String(), "step 3 loss") { // world rank 0 prints the steps
		if time.Now().After(deadline) {
			t.Fatalf("training did not start; rank 0 stderr:\n%s", procs[0].stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	const victim = 3 // pp 1, dp 1
	killed := time.Now()
	if err := procs[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	errs := waitAll(t, procs, victim, 15*time.Second)
	t.Logf("rank 0 (another pipeline, another DP group): %s", procs[0].stderr.String())
	t.Logf("rank 2 (the victim's DP group): %s", procs[2].stderr.String())
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d exited 0 after rank %d was killed", r, victim)
		}
		if msg := procs[r].stderr.String(); !strings.Contains(msg, fmt.Sprintf("rank %d", victim)) {
			t.Errorf("rank %d's error does not name rank %d:\n%s", r, victim, msg)
		}
		if d := procs[r].exited.Sub(killed); d > 10*time.Second {
			t.Errorf("rank %d took %v to notice", r, d)
		}
	}
}

// TestDPTolerance: -check keeps the tolerances except float32 with
// an engine's own sums over more than two members.
func TestDPTolerance(t *testing.T) {
	for _, c := range []struct {
		dtype  string
		native bool
		dp     int
		want   float64
	}{
		{"float64", true, 4, 1e-12},
		{"float32", false, 4, 1e-5},
		{"float32", true, 2, 1e-5},
		{"float32", true, 4, 1e-4},
	} {
		o := options{schedule: "1f1b", dtype: c.dtype}
		if got := o.dpTolerance(c.native, c.dp); got != c.want {
			t.Errorf("%s, native %v, dp %d: tolerance %g, want %g", c.dtype, c.native, c.dp, got, c.want)
		}
	}
}
