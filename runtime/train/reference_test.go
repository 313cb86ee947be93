package train_test

import (
	"math"
	"testing"

	"github.com/ppgen/ppgen/runtime/train"
)

// TestReference trains the same job through every layout and with
// train.Reference, the model without a pipeline: AdamW, clipping by the
// global norm and the cosine schedule of config (its third step clips).
// One model copy equals the reference bit for bit (losses, parameters),
// ties and data-parallel replicas (plain and FSDP, its parameters gathered
// from the shards) included, the gradient
// norms within an ulp; dualpipe's two copies (auto picks dualpipe too)
// sum their gradients in another order, within 1e-12 relative, as does
// clipping at every step.
func TestReference(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    train.Program
		dp   int
		tied bool
		tol  float64 // 0: bit for bit
		clip float64 // 0: config's
	}{
		{"one rank", single, 1, false, 0, 0}, {"1f1b", onef1b, 1, false, 0, 0}, {"zbv", zbv2, 1, false, 0, 0},
		{"tie", tie, 1, true, 0, 0}, {"mpipe", mpipe, 1, false, 0, 0}, {"ship-labels", ship, 1, false, 0, 0},
		{"clip", clip, 1, false, 0, 0}, {"auto", auto, 1, false, 1e-12, 0}, {"dp", halfProg, 2, false, 0, 0}, {"fsdp", fsdp, 2, false, 0, 0},
		{"dualpipe", dual, 1, false, 1e-12, 0},
		// Clipped at every step: the norms round apart (the squares summed
		// per rank, then over the ranks), and so the clipped gradients.
		{"1f1b clipped", onef1b, 1, false, 1e-12, 0.1}, {"dp clipped", halfProg, 2, false, 1e-12, 0.1},
	} {
		t.Run(tc.name+" "+describe(tc.p, tc.dp), func(t *testing.T) {
			c := config(tc.p, tc.dp, 3)
			c.FSDP = tc.p.Spec.Fingerprint == fsdp.Spec.Fingerprint
			if tc.clip > 0 {
				c.Clip = tc.clip
			}
			if tc.tied {
				c.Layer = tiedLayer
			}
			got := run(t, c)
			want, err := train.Reference(c)
			if err != nil {
				t.Fatal(err)
			}
			var norms, refNorms []float64
			for _, r := range got.Records {
				norms = append(norms, r.GradNorm)
			}
			for _, r := range want.Records {
				refNorms = append(refNorms, r.GradNorm)
			}
			compare := func(what string, a, b []float64, tol float64) {
				t.Helper()
				if tol == 0 {
					same(t, what, a, b)
					return
				}
				if len(a) != len(b) {
					t.Fatalf("%s: %d values against %d", what, len(a), len(b))
				}
				for i := range a {
					if d := math.Abs(a[i]-b[i]) / max(math.Abs(a[i]), math.Abs(b[i]), 1e-30); d > tol {
						t.Fatalf("%s: value %d is %v, the reference's %v: relative difference %g > %g", what, i, a[i], b[i], d, tol)
					}
				}
			}
			compare("losses", losses(got), losses(want), tc.tol)
			// The norm's squares are summed per rank, then over the ranks.
			compare("gradient norms", norms, refNorms, max(tc.tol, 1e-15))
			compare("parameters", values(got), values(want), tc.tol) // FSDP: gathered at the end
		})
	}
}
