package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/gencmd"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/tune"
)

// TestWideMatchesSequential: the uneven model (-wide, -wide-wait) trains as
// sequential training does, with the even-cost choice and with the tuned
// schedule (two model copies: the reference is one copy).
func TestWideMatchesSequential(t *testing.T) {
	for _, name := range []string{"dualpipev", "tuned", "1f1b"} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			o := options{schedule: name, transport: "inproc", steps: 2, check: true, dtype: "float64", lr: 0.1, seed: 3, wide: 4, wideWait: 50 * time.Microsecond}
			if err := runInProc(o, &out); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
		})
	}
}

// TestWideIsWider: -wide changes the model (more parameters in the first
// and last blocks only) and 0 leaves it as it was.
func TestWideIsWider(t *testing.T) {
	count := func(wide int) []int {
		st, err := buildStages(4, tensor.Float64, 1, widen{n: wide})
		if err != nil {
			t.Fatal(err)
		}
		var n []int
		for _, s := range st {
			n = append(n, len(s.Params()))
		}
		return n
	}
	// Each Linear has a weight and a bias; a wide block has two Linears.
	if got, want := fmt.Sprint(count(0)), "[4 4 4 6]"; got != want {
		t.Errorf("-wide 0: parameters per stage %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(count(8)), "[6 4 4 8]"; got != want {
		t.Errorf("-wide 8: parameters per stage %s, want %s", got, want)
	}
}

// TestTuneLoop is the measured-cost loop of BENCHMARKS.md "Measured
// costs" up to the rebuild: a measured run of dualpipev (auto's choice at
// even costs) on the uneven model, `ppgen tune`'s fit of its timeline, and
// -schedule auto under the fitted model, which must choose the committed
// tuned schedule's family, not dualpipev, and expect it at least 1.5 times
// faster (dualpipev runs both wide blocks of every micro-batch on rank 0;
// the tuned choice spreads them over two ranks). The committed model is
// tune's fit of the committed trace, byte for byte.
func TestTuneLoop(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "run.json")
	var out bytes.Buffer
	o := options{schedule: "dualpipev", transport: "inproc", steps: 3, dtype: "float64", lr: 0.1, seed: 1, wide: 32, trace: trace}
	if err := runInProc(o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fit, err := tune.Read(f, tune.Options{Stages: 8})
	if err != nil {
		t.Fatal(err)
	}
	modelPath := filepath.Join(dir, "model.json")
	if err := os.WriteFile(modelPath, fit.JSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	req := &gencmd.Request{Schedule: auto.Name, Ranks: 4, Micro: 8, Model: modelPath}
	res, err := req.Lower()
	if err != nil {
		t.Fatal(err)
	}
	want := catalog["tuned"].Spec.Schedule
	if res.Config.Schedule != want || want == "dualpipev" {
		t.Errorf("auto under the fitted model chose %s; the committed tuned schedule is %s (and must not be dualpipev)", res.Config.Schedule, want)
	}
	makespan := func(name string) float64 {
		res, err := (&gencmd.Request{Schedule: name, Ranks: 4, Micro: 8}).Lower()
		if err != nil {
			t.Fatal(err)
		}
		price, err := (&gencmd.Request{Model: modelPath}).Pricing()
		if err != nil {
			t.Fatal(err)
		}
		c, err := price.Stages(res.Program.Stages(), max(res.Program.Copies, 1))
		if err != nil {
			t.Fatal(err)
		}
		sr, err := sim.Run(res.Program, c)
		if err != nil {
			t.Fatal(err)
		}
		return sr.Makespan
	}
	if before, after := makespan("dualpipev"), makespan(want); before < 1.5*after {
		t.Errorf("under the fitted model dualpipev takes %g ms and %s %g ms; want a gain of at least 1.5x", before, want, after)
	}

	committed, err := os.ReadFile("tuned/wide-model.json")
	if err != nil {
		t.Fatal(err)
	}
	tf, err := os.Open("../../gen/tune/testdata/dualpipev-wide.json")
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	cfit, err := tune.Read(tf, tune.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cfit.JSON(), committed) {
		t.Errorf("tuned/wide-model.json is not tune's fit of gen/tune/testdata/dualpipev-wide.json; rerun ppgen tune -trace ... -o examples/mlp/tuned/wide-model.json")
	}
	if !strings.Contains(string(committed), `"stage7"`) {
		t.Errorf("the committed model has not 8 layers:\n%s", committed)
	}
}
