package passes

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

// TestRecomputeModel: -recompute model takes the stages and shares that
// Options.MarkedShares gives for the program's stages (a share of 1 is
// full, 0 none), so that the program's RecomputeShare, the verifier's and
// the simulator's live memory follow the marked layers; without
// MarkedShares (no -model), with no marked stage and with MarkedShares'
// own error it refuses with an error that says so.
func TestRecomputeModel(t *testing.T) {
	cfg := ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8}
	for _, tc := range []struct {
		name      string
		marked    func(stages, copies int) ([]float64, error)
		share     []float64 // the program's RecomputeShare
		recompute []int     // the stages with RECOMPUTE steps
		live      []float64 // the verifier's and simulator's PeakLive
		err       string
	}{
		{"half-full-full-none", func(int, int) ([]float64, error) { return []float64{0.5, 1, 1, 0}, nil },
			[]float64{0.5, 0, 0, 0}, []int{0, 1, 2}, []float64{2.5, 1, 1, 1}, ""},
		{"last-quarter", func(int, int) ([]float64, error) { return []float64{0, 0, 0, 0.25}, nil },
			[]float64{0, 0, 0, 0.25}, []int{3}, []float64{4, 3, 2, 1}, ""},
		{"no-model", nil, nil, nil, nil, "give -model FILE"},
		{"none-marked", func(int, int) ([]float64, error) { return []float64{0, 0, 0, 0}, nil }, nil, nil, nil, "no stage begins with a layer"},
		{"error", func(int, int) ([]float64, error) { return nil, errors.New("not a prefix") }, nil, nil, nil, "-recompute model: not a prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := schedules.Build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			q, _, err := Lower(p, Options{MarkedShares: tc.marked, Set: map[string]string{"recompute": "model"}})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v; want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(q.RecomputeShare, tc.share) {
				t.Errorf("RecomputeShare %v; want %v", q.RecomputeShare, tc.share)
			}
			var stages []int
			for _, steps := range q.Ranks {
				for _, st := range steps {
					if st.Kind == abi.Recompute && !slices.Contains(stages, st.Stage) {
						stages = append(stages, st.Stage)
					}
				}
			}
			slices.Sort(stages)
			if !slices.Equal(stages, tc.recompute) {
				t.Errorf("RECOMPUTE steps of stages %v; want %v", stages, tc.recompute)
			}
			rep, err := verify.Check(q, verify.Options{})
			if err != nil {
				t.Fatal(err)
			}
			res, err := sim.Run(q, sim.DefaultCost())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rep.PeakLive, tc.live) || !slices.Equal(res.PeakLive, tc.live) {
				t.Errorf("PeakLive: verifier %v, simulator %v; want %v", rep.PeakLive, res.PeakLive, tc.live)
			}
		})
	}
}
