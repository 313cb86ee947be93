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
