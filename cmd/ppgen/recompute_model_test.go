package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenRecomputeModel: `ppgen gen -model FILE -recompute model`
// recomputes the layers the model file marks "recompute": true (a stage
// with its first of two layers marked: share 0.5; both: full), records
// the flags so that `ppgen check` regenerates the file, and sim prints
// the live chunks of those shares; without -model, with -schedule auto
// or -partition auto, and with marks that are not a stage's first layers
// it is an error that says why.
func TestGenRecomputeModel(t *testing.T) {
	dir := t.TempDir()
	writeModel := func(name string, marks ...bool) string {
		var ls []string
		for _, m := range marks {
			mark := ""
			if m {
				mark = `, "recompute": true`
			}
			ls = append(ls, `{"F": 1, "B": 2, "act": 1, "params": 1`+mark+`}`)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(`{"layers": [`+strings.Join(ls, ", ")+`]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := writeModel("good.json", true, false, true, true, false, false, false, false)
	path := filepath.Join(dir, "schedule_gen.go")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"gen", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", good, "-recompute", "model", "-package", "p", "-o", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr.String())
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-recompute model", "Recompute:      []int{0, 1},", "RecomputeShare: []float64{0.5, 0.0, 0.0, 0.0},"} {
		if !bytes.Contains(src, []byte(want)) {
			t.Errorf("the generated file lacks %q", want)
		}
	}
	if code := run([]string{"check", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("check: exit %d: %s", code, stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", good, "-recompute", "model"}, &stdout, &stderr); code != 0 {
		t.Fatalf("sim: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "(live chunks [2.5 1 2 1])") {
		t.Errorf("sim -recompute model: %s; want the live chunks 2.5 1 2 1", stdout.String())
	}
	gap := writeModel("gap.json", true, false, false, true, false, false, false, false)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-recompute", "model"}, "give -model FILE"},
		{[]string{"sim", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-model", good, "-recompute", "model"}, "-schedule auto and -partition auto choose the split"},
		{[]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", good, "-partition", "auto", "-recompute", "model"}, "-schedule auto and -partition auto choose the split"},
		{[]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", gap, "-recompute", "model"}, `layer 3 is marked "recompute": true but layer 2 of its stage 1`},
	} {
		stderr.Reset()
		if code := run(tc.args, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, %s; want an error saying %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
