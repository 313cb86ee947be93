package model

import (
	"fmt"
	"strconv"
	"strings"
)

// Preprocess is the preprocess (MPipe's transposed block: the first
// layers of the model, or a vision tower, run in each input load instead
// of in stage 0; docs/schedules.md's mpipe) that spec names in m: a count
// T, the first T layers (0: none), or a layer's name, the layers up to and
// including it (a tower named as one layer at the head of the model is
// T = 1). It returns T. At least one layer must stay in the stages.
func (m Model) Preprocess(spec string) (int, error) {
	n := len(m.Layers)
	if t, err := strconv.Atoi(spec); err == nil {
		if t < 0 || t >= n {
			return 0, fmt.Errorf("preprocess of %d layers: the model has %d layers, and at least one stays in the stages; want 0 to %d, or a layer's name", t, n, n-1)
		}
		return t, nil
	}
	for i, l := range m.Layers {
		if l.Name == spec && spec != "" {
			if i+1 >= n {
				return 0, fmt.Errorf("preprocess through layer %q: it is the last of the model's %d layers, and at least one stays in the stages", clip(spec), n)
			}
			return i + 1, nil
		}
	}
	names := make([]string, 0, min(n, 8))
	for _, l := range m.Layers[:min(n, 8)] {
		names = append(names, strconv.Quote(clip(l.Name)))
	}
	if n > 8 {
		names = append(names, "...")
	}
	return 0, fmt.Errorf("preprocess %q: no layer of the model is named so (its layers: %s); give a layer's name or a count of layers", clip(spec), strings.Join(names, ", "))
}

// SplitPreprocess splits m at its first t layers: the preprocess's
// forward and backward costs (their F summed, the sim's pre, and their
// I + W summed, its preb: a trainable tower's backward at OPT_STEP; layers
// of a frozen tower give B = 0) and the model of the stages, the other
// layers (the stages no longer hold the preprocess).
func (m Model) SplitPreprocess(t int) (pre, preB float64, body Model) {
	body = m
	t = max(0, min(t, len(m.Layers)))
	for _, l := range m.Layers[:t] {
		pre += l.F
		preB += l.I + l.W
	}
	body.Layers = m.Layers[t:]
	return pre, preB, body
}
