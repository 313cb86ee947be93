package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
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

// TestMarks: "recompute": true marks a layer (Read keeps it; a value
// that is not a boolean is refused); Marks gives each stage its marked
// layers, anywhere in it, their share of the stage's act (bytes) and of
// its R (default F), figures worked by hand below; by count when the
// stage gives no act; the whole stage when every layer is marked; and
// refuses a model with no mark or a stage whose marked layers hold no act
// while others do. EvenMarks splits evenly and repeats over model copies.
func TestMarks(t *testing.T) {
	layer := func(f, act float64, extra string) string {
		return fmt.Sprintf(`{"F": %g, "B": 2, "act": %g, "params": 1%s}`, f, act, extra)
	}
	const on = `, "recompute": true`
	// Stage 0 = layers 0..2, marks 0 and 2: act (4+2)/(4+1+2) = 6/7, R
	// (1+0.5)/(1+2+0.5) = 3/7. Stage 1 = layers 3..5, marks 4 and 5 (1
	// and 2 within it): act (2+6)/(3+2+6) = 8/11, R (2+1)/(1+2+1) = 0.75.
	// Layers 2..5 as one stage, marks 2, 4, 5: act (2+2+6)/13, R
	// (0.5+2+1)/(0.5+1+2+1) = 3.5/4.5.
	mixed := []string{layer(1, 4, on), layer(2, 1, ""), layer(1, 2, `, "R": 0.5`+on), layer(1, 3, ""), layer(2, 2, on), layer(1, 6, on)}
	for _, tc := range []struct {
		name   string
		layers []string
		bounds []int
		copies int
		want   []ir.Mark
		err    string
	}{
		{"anywhere", mixed, []int{0, 3, 6}, 1, []ir.Mark{{Layers: []int{0, 2}, Share: 6.0 / 7, Cost: 3.0 / 7}, {Layers: []int{1, 2}, Share: 8.0 / 11, Cost: 0.75}}, ""},
		{"whole-and-none", mixed, []int{0, 1, 2, 6}, 1, []ir.Mark{{Share: 1, Cost: 1}, {}, {Layers: []int{0, 2, 3}, Share: 10.0 / 13, Cost: 3.5 / 4.5}}, ""},
		{"copies", mixed[3:], []int{0, 3}, 2, []ir.Mark{{Layers: []int{1, 2}, Share: 8.0 / 11, Cost: 0.75}, {Layers: []int{1, 2}, Share: 8.0 / 11, Cost: 0.75}}, ""},
		{"no-act", []string{layer(1, 0, ""), layer(3, 0, on), layer(1, 0, ""), layer(1, 0, "")}, []int{0, 4}, 1, []ir.Mark{{Layers: []int{1}, Share: 0.25, Cost: 0.5}}, ""},
		{"marked-no-act", []string{layer(1, 1, ""), layer(1, 0, on)}, []int{0, 2}, 1, nil, "marks layers [1] \"recompute\": true, which hold no activations"},
		{"none", []string{layer(1, 1, ""), layer(1, 1, `, "recompute": false`)}, []int{0, 1, 2}, 1, nil, "no layer is marked"},
		{"bad-partition", []string{layer(1, 1, on), layer(1, 1, "")}, []int{0, 1}, 1, nil, "does not cover"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Read(strings.NewReader(`{"layers": [` + strings.Join(tc.layers, ", ") + `]}`))
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range tc.layers {
				if m.Layers[i].Recompute != strings.HasSuffix(l, on+"}") {
					t.Errorf("layer %d: Recompute = %v; the file says %s", i, m.Layers[i].Recompute, l)
				}
			}
			got, err := m.Marks(Partition{Bounds: tc.bounds}, tc.copies)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v; want one saying %q", err, tc.err)
			case tc.err == "" && (err != nil || !marksNear(got, tc.want)):
				t.Errorf("Marks = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := Read(strings.NewReader(`{"layers": [` + layer(1, 1, `, "recompute": 1`) + `]}`)); err == nil || !strings.Contains(err.Error(), "recompute") {
		t.Errorf(`"recompute": 1: %v; want an error naming the key`, err)
	}
	if _, err := Read(strings.NewReader(`{"layers": [` + layer(1, 1, on+on) + `]}`)); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf(`"recompute" twice: %v; want an error`, err)
	}
	m, err := Read(strings.NewReader(`{"layers": [` + strings.Join([]string{layer(1, 1, ""), layer(1, 3, on), layer(1, 1, ""), layer(1, 1, "")}, ", ") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	half := ir.Mark{Layers: []int{1}, Share: 0.75, Cost: 0.5}
	if got, err := m.EvenMarks(4, 2); err != nil || !marksNear(got, []ir.Mark{half, {}, half, {}}) {
		t.Errorf("EvenMarks(4, 2) = %v, %v; want [%v {} %v {}]", got, err, half, half)
	}
	if _, err := m.EvenMarks(3, 2); err == nil || !strings.Contains(err.Error(), "do not form 2 model copies") {
		t.Errorf("EvenMarks(3, 2): %v; want an error", err)
	}
	if _, err := m.MarksOf(Partition{Bounds: []int{0, 2, 4}})(3, 1); err == nil || !strings.Contains(err.Error(), "has 2 stages per copy") {
		t.Errorf("MarksOf a split of 2 stages for 3: %v; want an error", err)
	}
}

// marksNear reports whether a and b are the same marks, shares within
// 1e-12.
func marksNear(a, b []ir.Mark) bool {
	return slices.EqualFunc(a, b, func(x, y ir.Mark) bool {
		return slices.Equal(x.Layers, y.Layers) && math.Abs(x.Share-y.Share) < 1e-12 && math.Abs(x.Cost-y.Cost) < 1e-12
	})
}
