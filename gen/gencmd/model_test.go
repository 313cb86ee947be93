package gencmd

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// TestModelStageCost: -model splits the layers evenly over the stages and
// the simulation charges each stage its layers' sum: 1F1B on 2 ranks, one
// micro-batch, is F0 + F1 + B1 + B0 = (1+2) + (3+4) + (6+8) + (2+4) = 30.
func TestModelStageCost(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.json")
	if err := os.WriteFile(path, []byte(`{"layers": [
		{"F": 1, "B": 2, "act": 1, "params": 1}, {"F": 2, "B": 4, "act": 1, "params": 1},
		{"F": 3, "B": 6, "act": 1, "params": 1}, {"F": 4, "B": 8, "act": 1, "params": 1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Request{Model: "m.json", Env: Env{Dir: dir}}
	c, err := stageCost(r, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.F, []float64{3, 7}) || !slices.Equal(c.B, []float64{6, 14}) {
		t.Fatalf("F %v B %v, want [3 7] and [6 14]", c.F, c.B)
	}
	res, err := gen.Lower(ir.Config{Schedule: "1f1b", Ranks: 2, Micro: 1}, gen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := sim.Run(res.Program, c)
	if err != nil {
		t.Fatal(err)
	}
	if got.Makespan != 30 {
		t.Errorf("makespan %g, want 30", got.Makespan)
	}
	for _, tc := range []struct {
		req  Request
		want string
	}{
		{Request{Model: "m.json", Cost: "F=1", Env: Env{Dir: dir}}, "F is given per layer by -model"},
		{Request{Model: "m.json", Cost: "comm=-1", Env: Env{Dir: dir}}, "comm"},
		{Request{Model: "missing.json", Env: Env{Dir: dir}}, "reading -model"},
	} {
		if _, err := stageCost(&tc.req, 2, 1); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.req, err, tc.want)
		}
	}
	if _, err := stageCost(r, 5, 1); err == nil || !strings.Contains(err.Error(), "4 layers cannot fill 5 stages") {
		t.Errorf("5 stages of 4 layers: %v", err)
	}
	with := &Request{Model: "m.json", Cost: "comm=0.5,opt=2", Env: Env{Dir: dir}}
	if c, err := stageCost(with, 2, 1); err != nil || c.Comm != 0.5 || c.Opt != 2 || c.F[1] != 7 {
		t.Errorf("-cost comm=0.5,opt=2 with -model: %+v, %v", c, err)
	}
	// Two model copies (dualpipe) each hold the whole model.
	if c, err := stageCost(r, 4, 2); err != nil || !slices.Equal(c.F, []float64{3, 7, 3, 7}) {
		t.Errorf("4 stages in 2 copies: F %v, %v; want [3 7 3 7]", c.F, err)
	}
}

// TestGenModel: a command that does not simulate (gen, show, verify) takes
// -model for -schedule auto, whose candidates it then costs (opt.StageCost):
// with the first and last of 8 layers 30 times the rest, auto leaves
// dualpipev (its choice at even costs, both heavy layers on rank 0). With a
// fixed family -model is refused, as -cost is.
func TestGenModel(t *testing.T) {
	dir := t.TempDir()
	var layers []string
	for l := range 8 {
		c := 1.0
		if l == 0 || l == 7 {
			c = 30
		}
		layers = append(layers, fmt.Sprintf(`{"F": %g, "I": %g, "W": %g, "act": 1, "params": 1}`, c, c, c))
	}
	if err := os.WriteFile(filepath.Join(dir, "m.json"), []byte(`{"layers": [`+strings.Join(layers, ",")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	choose := func(args ...string) (string, error) {
		r := new(Request)
		fs := flag.NewFlagSet("gen", flag.ContinueOnError)
		r.Bind(fs, Flags{Output: true})
		if err := fs.Parse(args); err != nil {
			return "", err
		}
		r.Env = Env{Dir: dir}
		res, err := r.Lower()
		return res.Config.Schedule, err
	}
	even, err := choose("-schedule", "auto", "-ranks", "4", "-micro", "8")
	if err != nil || even != "dualpipev" {
		t.Fatalf("auto at even costs: %s, %v; want dualpipev (the premise of this test)", even, err)
	}
	got, err := choose("-schedule", "auto", "-ranks", "4", "-micro", "8", "-model", "m.json")
	if err != nil || got == "dualpipev" {
		t.Errorf("auto with -model: %s, %v; want another family than dualpipev", got, err)
	}
	if _, err := choose("-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", "m.json"); err == nil || !strings.Contains(err.Error(), "-schedule auto only") {
		t.Errorf("1f1b with -model: %v; want the refusal", err)
	}
}

// stageCost is the cost model r's Pricing simulates a program of the given
// stages and copies by.
func stageCost(r *Request, stages, copies int) (sim.Cost, error) {
	p, err := r.Pricing()
	if err != nil {
		return sim.Cost{}, err
	}
	return p.Stages(stages, copies)
}

// TestMpipePre: -mpipe-pre takes the model's first layers out of the
// stages and costs their F as pre and their B as preb; its errors name the value and the
// model.
func TestMpipePre(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.json"), []byte(`{"layers": [
		{"name": "vit", "F": 0.5, "B": 1, "act": 1, "params": 1}, {"name": "b0", "F": 1, "B": 2, "act": 1, "params": 1},
		{"name": "b1", "F": 2, "B": 4, "act": 1, "params": 1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{"1", "vit"} {
		c, err := stageCost(&Request{Model: "m.json", MpipePre: spec, Env: Env{Dir: dir}}, 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.F, []float64{1, 2}) || c.Pre != 0.5 || c.PreB != 1 {
			t.Errorf("-mpipe-pre %s: F %v pre %g preb %g, want [1 2], 0.5 and 1", spec, c.F, c.Pre, c.PreB)
		}
	}
	for _, tc := range []struct {
		req  Request
		want string
	}{
		{Request{Model: "m.json", MpipePre: "3", Env: Env{Dir: dir}}, "-mpipe-pre 3 with -model m.json: preprocess of 3 layers: the model has 3 layers"},
		{Request{Model: "m.json", MpipePre: "tower", Env: Env{Dir: dir}}, `preprocess "tower": no layer of the model is named so`},
		{Request{MpipePre: "1", Env: Env{Dir: dir}}, "give -model FILE"},
		{Request{Model: "m.json", MpipePre: "1", Cost: "pre=1", Env: Env{Dir: dir}}, "give one of them"},
		{Request{Model: "m.json", MpipePre: "2", Env: Env{Dir: dir}}, "1 layers cannot fill 2 stages"},
	} {
		if _, err := stageCost(&tc.req, 2, 1); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.req, err, tc.want)
		}
	}
}
