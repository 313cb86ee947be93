package model

import (
	"strings"
	"testing"
)

// TestPreprocess: -mpipe-pre's T, by count or by a layer's name, the cost
// it takes out of the stages, and its errors.
func TestPreprocess(t *testing.T) {
	m := Model{Layers: []Layer{{Name: "vit", F: 0.5, I: 0.5, W: 0.5}, {Name: "proj", F: 0.25, W: 0.25}, {Name: "block0", F: 1}, {Name: "block1", F: 1}}}
	for _, tc := range []struct {
		spec    string
		want    int
		pre     float64
		preB    float64
		wantErr string
	}{
		{spec: "0", want: 0, pre: 0},
		{spec: "2", want: 2, pre: 0.75, preB: 1.25},
		{spec: "vit", want: 1, pre: 0.5, preB: 1},
		{spec: "proj", want: 2, pre: 0.75, preB: 1.25},
		{spec: "4", wantErr: "the model has 4 layers, and at least one stays in the stages; want 0 to 3"},
		{spec: "-1", wantErr: "want 0 to 3"},
		{spec: "block1", wantErr: "it is the last of the model's 4 layers"},
		{spec: "tower", wantErr: `no layer of the model is named so (its layers: "vit", "proj", "block0", "block1")`},
	} {
		got, err := m.Preprocess(tc.spec)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Preprocess(%q) = %d, %v; want an error with %q", tc.spec, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Preprocess(%q) = %d, %v; want %d", tc.spec, got, err, tc.want)
			continue
		}
		pre, preB, body := m.SplitPreprocess(got)
		if pre != tc.pre || preB != tc.preB || len(body.Layers) != len(m.Layers)-got || (got < len(m.Layers) && body.Layers[0].Name != m.Layers[got].Name) {
			t.Errorf("SplitPreprocess(%d) = %g, %g, %d layers; want %g, %g, %d", got, pre, preB, len(body.Layers), tc.pre, tc.preB, len(m.Layers)-got)
		}
	}
}
