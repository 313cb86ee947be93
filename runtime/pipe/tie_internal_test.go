package pipe

import (
	"math"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// TestDescribeMeta: a peer's description of its tied gradients is decoded
// without trusting it: malformed ones (NaN, counts and ranks past the end,
// another dtype) are worded, never a panic.
func TestDescribeMeta(t *testing.T) {
	good := tieMeta([]*tensor.Dense{tensor.New(tensor.WithShape(4, 3), tensor.WithBacking(make([]float64, 12))), tensor.New(tensor.WithShape(3), tensor.WithBacking(make([]float32, 3)))})
	if got, want := describeMeta(good), "2 (float64 [4 3], float32 [3])"; got != want {
		t.Errorf("describeMeta = %q; want %q", got, want)
	}
	vec := func(v ...float64) *tensor.Dense { return tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v)) }
	for _, bad := range []*tensor.Dense{
		vec(), vec(math.NaN()), vec(5, 0, 1, 3), vec(1, 0, math.NaN(), 3), vec(1, 0, 9, 3), vec(1e300), vec(-1),
		tensor.New(tensor.WithShape(2), tensor.WithBacking([]float32{1, 0})),
	} {
		if got := describeMeta(bad); !strings.Contains(got, "undecodable") {
			t.Errorf("describeMeta(%v) = %q; want it undecodable", bad, got)
		}
	}
	if got := describeMeta(vec(1, 7, 1, 2)); got != "1 (another dtype [2])" {
		t.Errorf("an unknown dtype code: %q", got)
	}
}
