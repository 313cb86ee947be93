package pipe_test

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// TestSpecLayersValidate: Spec.Layers holds one non-empty range per stage.
func TestSpecLayersValidate(t *testing.T) {
	base := pipe.Spec{Schedule: "t", Ranks: 2, Stages: 2, Micro: 2, Slots: []int{1, 1}, RankOf: []int{0, 1}}
	for _, tc := range []struct {
		layers [][2]int
		want   string // "" valid
	}{
		{nil, ""},
		{[][2]int{{0, 3}, {3, 5}}, ""},
		{[][2]int{{0, 3}}, "len(Layers) = 1"},
		{[][2]int{{0, 3}, {3, 3}}, "Layers[1]"},
		{[][2]int{{-1, 3}, {3, 4}}, "Layers[0]"},
	} {
		sp := base
		sp.Layers = tc.layers
		err := sp.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Layers %v: Validate = %v, want %q", tc.layers, err, tc.want)
		}
	}
}
