package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/examples/internal/compare"
	"github.com/ppgen/ppgen/runtime/nn"
)

// TestGonumBackendMatchesSequential: the model on gonum's mat.Dense,
// through the value adapters, trains as runtime/nn's sequential reference
// does, within the gonum backend's tolerance, in-process: one pipeline,
// zero-bubble V, a tie (TIE_GRAD through pipe.ValueTied), two model
// copies (pipe.ValueCopyGrads) and overlap steps (two adapters at once).
func TestGonumBackendMatchesSequential(t *testing.T) {
	for _, name := range []string{"1f1b", "zbv", "1f1b-tie", "dualpipe", "interleaved-overlap"} {
		for _, interpret := range []bool{false, true} {
			if interpret && catalog[name].Program == nil {
				continue
			}
			t.Run(fmt.Sprintf("%s/interpret=%v", name, interpret), func(t *testing.T) {
				var out bytes.Buffer
				o := options{schedule: name, transport: "inproc", steps: 3, check: true, dtype: "float64", lr: 0.1, seed: 7, interpret: interpret, backend: "gonum"}
				if err := runInProc(o, &out); err != nil {
					t.Fatalf("%v\n%s", err, out.String())
				}
				if !strings.Contains(out.String(), "check: max relative difference") {
					t.Fatalf("no check line in output:\n%s", out.String())
				}
			})
		}
	}
}

// TestGonumTrainsTheWeights: with -backend gonum the gonum layers do the
// training: the weights stored back differ from the initial ones, agree
// with the nn reference to rounding, and are not nn's bits (gonum sums in
// another order), so -check compares the gonum model, not an untouched or
// nn-trained one.
func TestGonumTrainsTheWeights(t *testing.T) {
	o := options{schedule: "1f1b", transport: "inproc", steps: 3, dtype: "float64", lr: 0.1, seed: 7, backend: "gonum"}
	var trained []*nn.Param
	o.trained = &trained
	if err := runInProc(o, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	sp := catalog["1f1b"].Spec
	initial, err := buildStages(stagesPerCopy(sp), tensor.Float64, o.seed, widen{})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := compare.Params(trained, params(initial)); err != nil || d < 1e-6 {
		t.Fatalf("trained weights differ from the initial ones by %g (err %v): the gonum training did not reach them", d, err)
	}
	ref, _, err := sequentialReference(o, sp, tensor.Float64)
	if err != nil {
		t.Fatal(err)
	}
	d, err := compare.Params(trained, params(ref))
	if err != nil {
		t.Fatal(err)
	}
	if d == 0 || d > o.tolerance() {
		t.Fatalf("gonum vs nn sequential: max relative parameter difference %g; want rounding-level, in (0, %g]", d, o.tolerance())
	}
}

// TestGonumSchedulesAgree: the value adapters add no rounding: every
// schedule trains the gonum model to the same bits (their micro-batch
// gradients sum in one order), in-process, through the generated code and
// the interpreter.
func TestGonumSchedulesAgree(t *testing.T) {
	var first []*nn.Param
	for _, name := range []string{"1f1b", "gpipe", "zbv", "interleaved-split", "mpipe"} {
		o := options{schedule: name, transport: "inproc", steps: 3, dtype: "float64", lr: 0.1, seed: 3, backend: "gonum", interpret: name == "zbv"}
		var trained []*nn.Param
		o.trained = &trained
		if err := runInProc(o, &bytes.Buffer{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// One model copy's stages (zbv's 8 stages are the 8 blocks in order
		// as 1f1b's 4 stages are): compare the parameter lists in order.
		if first == nil {
			first = trained
			continue
		}
		if d, err := compare.Params(trained, first); err != nil || d != 0 {
			t.Errorf("%s trains the gonum model to %g from 1f1b's (err %v); want the same bits", name, d, err)
		}
	}
}

// TestGonumBackendFlags: -backend gonum refuses float32 and -dp, and an
// unknown backend is named.
func TestGonumBackendFlags(t *testing.T) {
	for _, tc := range []struct {
		o    options
		want string
	}{
		{options{backend: "gonum", dtype: "float32", dp: 1}, "float64"},
		{options{backend: "gonum", dtype: "float64", dp: 2}, "-dp 2"},
		{options{backend: "torch", dtype: "float64", dp: 1}, `"torch"`},
	} {
		err := tc.o.checkBackend()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %s", tc.o, err, tc.want)
		}
	}
	if err := (options{backend: "gonum", dtype: "float64", dp: 1}).checkBackend(); err != nil {
		t.Errorf("gonum float64: %v", err)
	}
}

// TestGonumTCP: -backend gonum over TCP, 4 OS processes.
func TestGonumTCP(t *testing.T) {
	bin := exampleBinary(t)
	for _, name := range []string{"1f1b", "zbv"} {
		cmd := exec.Command(bin, "-transport", "tcp", "-check", "-schedule", name, "-steps", "3", "-backend", "gonum")
		cmd.Env = withoutRankEnv(os.Environ())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if got := strings.Count(string(out), "check: max relative difference"); got != 4 {
			t.Fatalf("%s: %d ranks reported a check, want 4:\n%s", name, got, out)
		}
	}
}

// TestGonumPipelineIsSequential: the pipeline over the value adapters
// trains the gonum model to the very bits that training the gonum stages
// one after the other, without a pipeline, gives (their methods called
// directly, on mat.Dense): the adapters and the runtime add no rounding.
func TestGonumPipelineIsSequential(t *testing.T) {
	const steps, lr, seed = 3, 0.1, 5
	o := options{schedule: "zbv", transport: "inproc", steps: steps, dtype: "float64", lr: lr, seed: seed, backend: "gonum"}
	var trained []*nn.Param
	o.trained = &trained
	if err := runInProc(o, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	sp := catalog["zbv"].Spec
	ref, err := buildStages(1, tensor.Float64, seed, widen{}) // one stage: the whole model
	if err != nil {
		t.Fatal(err)
	}
	g, err := mirror(ref[0])
	if err != nil {
		t.Fatal(err)
	}
	data := newBatches(tensor.Float64, seed, sp.Micro)
	loss := gMSE{scale: 1 / float64(sp.Micro)}
	src := gBatches{data}
	for step := range steps {
		data.setStep(step)
		for m := range sp.Micro {
			x, _ := src.Input(m)
			y, saved, err := g.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			tgt, _ := src.Target(m)
			_, dy, err := loss.Loss(y, tgt)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.BackwardInput(saved, dy); err != nil {
				t.Fatal(err)
			}
			if err := g.BackwardWeight(saved, dy); err != nil {
				t.Fatal(err)
			}
		}
		gSGD([]*gStage{g}, lr)
	}
	// The mirror's matrices are ref's parameters.
	if d, err := compare.Params(trained, params(ref)); err != nil || d != 0 {
		t.Errorf("the zbv pipeline trains the gonum model %g from sequential gonum training (err %v); want the same bits", d, err)
	}
}

// gSGD steps every parameter of stages (p -= lr·g, as nn.SGD) and zeroes
// the gradients.
func gSGD(stages []*gStage, lr float64) {
	for _, st := range stages {
		for _, p := range st.params() {
			w, g := p.w.RawMatrix().Data, p.g.RawMatrix().Data
			for i := range w {
				w[i] -= lr * g[i]
			}
			p.g.Zero()
		}
	}
}
