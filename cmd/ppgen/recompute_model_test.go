package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenRecomputeModel: `ppgen gen -model FILE -recompute model`
// recomputes the layers the model file marks "recompute": true (a stage
// with its first of two layers marked: share 0.5; both: full), records
// them in Spec.RecomputeLayers and the flags so that `ppgen check`
// regenerates the file, and sim prints the live chunks of those shares
// and the layers; marks that are not a stage's first layers are taken
// (their act's share: 3 of 4), and so is -recompute model with -schedule
// auto, -partition auto and ppgen partition, whose split search counts
// the marks (within 7, which no split meets without them); without
// -model, and with no layer marked, it is an error that says why.
func TestGenRecomputeModel(t *testing.T) {
	dir := t.TempDir()
	writeModel := func(name string, marks ...bool) string {
		var ls []string
		for i, m := range marks {
			mark := ""
			if m {
				mark = `, "recompute": true`
			}
			act := 1
			if i == 3 {
				act = 3
			}
			ls = append(ls, fmt.Sprintf(`{"F": 1, "B": 2, "act": %d, "params": 1%s}`, act, mark))
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
	for _, want := range []string{"-recompute model", "Recompute:       []int{0, 1},", "RecomputeShare:  []float64{0.5, 0.0, 0.0, 0.0},", "RecomputeLayers: [][]int{{0}, nil, nil, nil},"} {
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
	if !strings.Contains(stdout.String(), "(live chunks [2.5 1 2 1])\nrecomputed layers: stage 0 layers 0 (act 0.5, R 0.5); stage 1 whole\n") {
		t.Errorf("sim -recompute model: %s; want the live chunks 2.5 1 2 1 and the layers", stdout.String())
	}
	gap := writeModel("gap.json", true, false, false, true, false, false, false, false)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", gap, "-recompute", "model"},
			"(live chunks [2.5 1.5 2 1])\nrecomputed layers: stage 0 layers 0 (act 0.5, R 0.5); stage 1 layers 3 (act 0.75, R 0.5)\n"},
		{[]string{"sim", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-model", gap, "-recompute", "model"}, "\nrecomputed layers: stage 0 layers 0 (act 0.5, R 0.5); stage 1 layers 3"},
		{[]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", gap, "-partition", "auto", "-recompute", "model"}, "\nrecomputed layers: stage 0 layers 0"},
		// a limit only the marks meet: the split search counts them
		{[]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", gap, "-partition", "auto", "-recompute", "model", "-mem", "7"}, "\nrecomputed layers: stage 0 layers 0"},
		{[]string{"partition", "-ranks", "4", "-model", gap, "-recompute", "model", "-mem", "7"}, "peak memory per rank 7,"},
		// without -recompute, -partition auto chooses the policy partition does (full: 82, the marks 87)
		{[]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", gap, "-partition", "auto", "-mem", "7"}, "recompute full: chosen under -mem 7,"},
	} {
		stdout.Reset()
		if code := run(tc.args, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), tc.want) {
			t.Errorf("%v: exit %d, %s%s; want %q", tc.args, code, stdout.String(), stderr.String(), tc.want)
		}
	}
	none := writeModel("none.json", false, false, false, false)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-recompute", "model"}, "give -model FILE"},
		{[]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", none, "-recompute", "model"}, `no layer is marked "recompute": true`},
		{[]string{"sim", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-model", none, "-recompute", "model"}, `no layer is marked "recompute": true`},
		{[]string{"sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", gap, "-partition", "auto", "-mem", "7", "-recompute", "none"}, "no split fits the memory limit 7"},
		{[]string{"partition", "-ranks", "4", "-model", gap, "-mem", "7", "-recompute", "none"}, "no split fits the memory limit 7"},
	} {
		stderr.Reset()
		if code := run(tc.args, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, %s; want an error saying %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
