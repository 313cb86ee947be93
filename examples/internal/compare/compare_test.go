package compare

import (
	"io"
	"math"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/nn"
)

func param(name string, v ...float64) *nn.Param {
	return &nn.Param{Name: name, Value: tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))}
}

func TestRelDiff(t *testing.T) {
	for _, tc := range []struct{ a, b, want float64 }{
		{1, 1, 0}, {0, 0, 0}, {2, 1, 0.5}, {-1, 1, 2}, {1e-40, 0, 1e-10},
	} {
		if got := RelDiff(tc.a, tc.b); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("RelDiff(%g, %g) = %g, want %g", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestParamsLayers: the largest difference is found whichever element
// holds it, float32 is widened, and mismatched shapes or layers are errors.
func TestParamsLayers(t *testing.T) {
	a := []*nn.Param{param("w", 1, 2), param("b", 4)}
	b := []*nn.Param{param("w", 1, 2), param("b", 3)}
	if d, err := Params(a, b); err != nil || d != 0.25 {
		t.Errorf("Params = %g, %v; want 0.25", d, err)
	}
	f32 := &nn.Param{Name: "w", Value: tensor.New(tensor.WithShape(2), tensor.WithBacking([]float32{1, 2}))}
	if d, err := Params([]*nn.Param{f32}, a[:1]); err != nil || d != 0 {
		t.Errorf("float32 against float64: %g, %v; want 0", d, err)
	}
	if _, err := Params(a, b[:1]); err == nil || !strings.Contains(err.Error(), "counts") {
		t.Errorf("two parameters against one: %v", err)
	}
	if _, err := Params(a[:1], []*nn.Param{param("w", 1)}); err == nil || !strings.Contains(err.Error(), "parameter w") {
		t.Errorf("sizes 2 and 1: %v", err)
	}
	if d, err := Layers(map[int][]*nn.Param{3: a}, map[int][]*nn.Param{3: b, 4: a}); err != nil || d != 0.25 {
		t.Errorf("Layers = %g, %v; want 0.25", d, err)
	}
	if _, err := Layers(map[int][]*nn.Param{5: a}, map[int][]*nn.Param{3: b}); err == nil || !strings.Contains(err.Error(), "layer 5") {
		t.Errorf("a layer the reference lacks: %v", err)
	}
}

func TestReport(t *testing.T) {
	var out strings.Builder
	if err := Report(&out, 1e-12, 0, 1e-13); err != nil || !strings.HasPrefix(out.String(), "check: max relative difference") {
		t.Errorf("within: %v, %q", err, out.String())
	}
	for _, d := range [][2]float64{{1e-11, 0}, {0, 1e-11}, {math.NaN(), 0}} {
		if err := Report(io.Discard, 1e-12, d[0], d[1]); err == nil {
			t.Errorf("Report(%g, %g) passed at 1e-12", d[0], d[1])
		}
	}
}
