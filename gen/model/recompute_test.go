package model

import (
	"slices"
	"strings"
	"testing"
)

// TestRecomputeCost: a layer's R (the cost of recomputing it) is optional;
// a stage's R sums its layers' R, F for a layer without one, and a model
// without any R leaves the cost's R nil (sim takes F).
func TestRecomputeCost(t *testing.T) {
	for _, tc := range []struct {
		json string
		want []float64
	}{
		{`{"layers": [{"F": 1, "B": 2, "act": 1, "params": 1, "R": 0.5}, {"F": 2, "B": 2, "act": 1, "params": 1}, {"F": 1, "B": 2, "act": 1, "params": 1}]}`, []float64{2.5, 1}},
		{`{"layers": [{"F": 1, "B": 2, "act": 1, "params": 1}, {"F": 2, "B": 2, "act": 1, "params": 1}, {"F": 1, "B": 2, "act": 1, "params": 1}]}`, nil},
	} {
		m, err := Read(strings.NewReader(tc.json))
		if err != nil {
			t.Fatal(err)
		}
		c, err := m.Cost(Partition{Bounds: []int{0, 2, 3}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.R, tc.want) {
			t.Errorf("%s: R = %v; want %v", tc.json, c.R, tc.want)
		}
	}
	if _, err := Read(strings.NewReader(`{"layers": [{"F": 1, "B": 2, "act": 1, "params": 1, "R": -1}]}`)); err == nil || !strings.Contains(err.Error(), "R = -1") {
		t.Errorf("R = -1: %v", err)
	}
}

// TestMarkedShares: "recompute": true marks a layer (Read keeps it; a
// value that is not a boolean is refused); MarkedShares gives each stage
// the share of its layers marked, which must be its first ones, and
// refuses a model with no mark; EvenMarkedShares splits evenly and repeats
// the shares over model copies.
func TestMarkedShares(t *testing.T) {
	layer := func(mark string) string {
		return `{"F": 1, "B": 2, "act": 1, "params": 1` + mark + `}`
	}
	const on, off = `, "recompute": true`, `, "recompute": false`
	for _, tc := range []struct {
		name   string
		marks  []string // per layer
		bounds []int
		want   []float64
		err    string
	}{
		{"prefixes", []string{on, "", on, on, off, off}, []int{0, 2, 4, 6}, []float64{0.5, 1, 0}, ""},
		{"one-stage", []string{on, on, on, ""}, []int{0, 4}, []float64{0.75}, ""},
		{"not-prefix", []string{on, "", "", on}, []int{0, 2, 4}, nil, `layer 3 is marked "recompute": true but layer 2 of its stage 1 (layers 2..3) is not`},
		{"gap", []string{on, "", on, ""}, []int{0, 4}, nil, "layer 2 is marked"},
		{"none", []string{"", off, "", ""}, []int{0, 2, 4}, nil, "no layer is marked"},
		{"bad-partition", []string{on, ""}, []int{0, 1}, nil, "does not cover"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ls []string
			for _, m := range tc.marks {
				ls = append(ls, layer(m))
			}
			m, err := Read(strings.NewReader(`{"layers": [` + strings.Join(ls, ", ") + `]}`))
			if err != nil {
				t.Fatal(err)
			}
			for i, mk := range tc.marks {
				if m.Layers[i].Recompute != (mk == on) {
					t.Errorf("layer %d: Recompute = %v; the file says %q", i, m.Layers[i].Recompute, mk)
				}
			}
			got, err := m.MarkedShares(Partition{Bounds: tc.bounds})
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v; want one saying %q", err, tc.err)
			case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
				t.Errorf("MarkedShares = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := Read(strings.NewReader(`{"layers": [` + layer(`, "recompute": 1`) + `]}`)); err == nil || !strings.Contains(err.Error(), "recompute") {
		t.Errorf(`"recompute": 1: %v; want an error naming the key`, err)
	}
	if _, err := Read(strings.NewReader(`{"layers": [` + layer(on+on) + `]}`)); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf(`"recompute" twice: %v; want an error`, err)
	}
	m, err := Read(strings.NewReader(`{"layers": [` + strings.Join([]string{layer(on), layer(""), layer(""), layer("")}, ", ") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.EvenMarkedShares(4, 2); err != nil || !slices.Equal(got, []float64{0.5, 0, 0.5, 0}) {
		t.Errorf("EvenMarkedShares(4, 2) = %v, %v; want [0.5 0 0.5 0]", got, err)
	}
	if _, err := m.EvenMarkedShares(3, 2); err == nil || !strings.Contains(err.Error(), "do not form 2 model copies") {
		t.Errorf("EvenMarkedShares(3, 2): %v; want an error", err)
	}
}
