// Package compare holds what the example trainers' -check measures against
// sequential training (train.Reference): relative differences of losses
// and parameters, and the one line they print. examples/mlp and
// examples/tower use it.
package compare

import (
	"fmt"
	"io"
	"math"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/nn"
)

// RelDiff is |a-b| / max(|a|, |b|, 1e-30): 0 when a == b.
func RelDiff(a, b float64) float64 {
	d := math.Abs(a - b)
	if d == 0 {
		return 0
	}
	return d / math.Max(math.Max(math.Abs(a), math.Abs(b)), 1e-30)
}

// Floats returns t's values as float64s (float32 widened, float64 as is).
func Floats(t *tensor.Dense) []float64 {
	if v, ok := t.Data().([]float32); ok {
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	return t.Float64s()
}

// Params returns the largest RelDiff between two parameter lists, element
// by element; lists or parameters of different sizes are an error.
func Params(a, b []*nn.Param) (float64, error) {
	if len(a) != len(b) {
		return 0, fmt.Errorf("parameter counts differ: %d and %d", len(a), len(b))
	}
	worst := 0.0
	for i := range a {
		x, y := Floats(a[i].Value), Floats(b[i].Value)
		if len(x) != len(y) {
			return 0, fmt.Errorf("parameter %s: sizes %d and %d", a[i].Name, len(x), len(y))
		}
		for j := range x {
			worst = math.Max(worst, RelDiff(x[j], y[j]))
		}
	}
	return worst, nil
}

// Layers returns the largest Params difference between the layers got
// holds (train.Result.Layers: by model layer) and the same layers of want;
// a layer of got that want lacks is an error.
func Layers(got, want map[int][]*nn.Param) (float64, error) {
	worst := 0.0
	for i, ps := range got {
		w, ok := want[i]
		if !ok {
			return 0, fmt.Errorf("layer %d: the reference has no such layer", i)
		}
		d, err := Params(ps, w)
		if err != nil {
			return 0, fmt.Errorf("layer %d: %w", i, err)
		}
		worst = math.Max(worst, d)
	}
	return worst, nil
}

// Report prints -check's line and returns an error when a difference
// exceeds tol (or is NaN).
func Report(out io.Writer, tol, lossDiff, paramDiff float64) error {
	fmt.Fprintf(out, "check: max relative difference vs sequential training: loss %.3g, parameters %.3g (tolerance %g)\n", lossDiff, paramDiff, tol)
	if !(lossDiff <= tol) || !(paramDiff <= tol) {
		return fmt.Errorf("pipeline training differs from sequential training beyond %g", tol)
	}
	return nil
}
