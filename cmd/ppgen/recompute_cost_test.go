package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGenRecomputeCost: `ppgen gen` writes Spec.RecomputeCost, per stage
// the share of the stage's R one RECOMPUTE of it costs, for a program with
// a selective or model policy, and nothing for none or full (whose files
// are as before). The model's stages are two layers each (-ranks 4 over
// 8 layers); the shares are worked out by hand from its F, R and act
// (below): under model the Spec carries the marked layers' R share, not
// their act share (RecomputeShare).
func TestGenRecomputeCost(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model.json")
	// stage 0: l0 (F 3, marked), l1 (F 1): R share 3/4, act 1/2.
	// stage 1: l2 (F 1, R 2), l3 (F 1, R 0.5, act 3, marked): R share
	// 0.5/2.5 = 0.2, act 3/4. Stages 2 and 3: nothing marked.
	layers := `{"layers": [
		{"F": 3, "B": 2, "act": 1, "params": 1, "recompute": true},
		{"F": 1, "B": 2, "act": 1, "params": 1},
		{"F": 1, "B": 2, "R": 2, "act": 1, "params": 1},
		{"F": 1, "B": 2, "R": 0.5, "act": 3, "params": 1, "recompute": true},
		{"F": 1, "B": 2, "act": 1, "params": 1},
		{"F": 1, "B": 2, "act": 1, "params": 1},
		{"F": 1, "B": 2, "act": 1, "params": 1},
		{"F": 1, "B": 2, "act": 1, "params": 1}]}`
	if err := os.WriteFile(model, []byte(layers), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		policy string
		want   string // the RecomputeCost line; "": none
	}{
		{"model", "RecomputeCost:   []float64{0.75, 0.2, 1.0, 1.0},"},
		{"selective:0.5", "RecomputeCost:  []float64{0.5, 0.5, 0.5, 0.5},"},
		{"selective:1=0.25", "RecomputeCost:  []float64{1.0, 0.25, 1.0, 1.0},"},
		{"selective:0=model,2=0.5", "RecomputeCost:   []float64{0.75, 1.0, 0.5, 1.0},"},
		{"full", ""},
		{"none", ""},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "schedule_gen.go")
			var stdout, stderr bytes.Buffer
			if code := run([]string{"gen", "-schedule", "1f1b", "-ranks", "4", "-micro", "4", "-model", model, "-recompute", tc.policy, "-package", "p", "-o", path}, &stdout, &stderr); code != 0 {
				t.Fatalf("gen: exit %d: %s", code, stderr.String())
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && bytes.Contains(src, []byte("RecomputeCost:")):
				t.Errorf("-recompute %s: the file has a RecomputeCost field", tc.policy)
			case tc.want != "" && !bytes.Contains(src, []byte(tc.want)):
				i := bytes.Index(src, []byte("Recompute"))
				t.Errorf("-recompute %s: the file lacks %q:\n%s", tc.policy, tc.want, src[max(i, 0):min(len(src), max(i, 0)+300)])
			}
		})
	}
}
