package passes

import (
	"cmp"
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

// TestRecomputeModel: -recompute model (or selective:S=model) takes the
// stages, shares, costs and layers that Options.Marked gives for the
// program's stages (a share of 1 is full, 0 none), so that the program's
// RecomputeShare, RecomputeCost and RecomputeLayers, the verifier's and
// the simulator's live memory and the simulated RECOMPUTE's time follow
// the marked layers; without Marked (no -model), with no marked stage, a
// stage of selective:S=model without marks and with Marked's own error it
// refuses with an error that says so.
func TestRecomputeModel(t *testing.T) {
	cfg := ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8}
	for _, tc := range []struct {
		name      string
		value     string // -recompute; "" is model
		marked    []ir.Mark
		err       error     // Marked's
		share     []float64 // the program's RecomputeShare
		cost      []float64 // its RecomputeCost
		layers    [][]int   // its RecomputeLayers
		recompute []int     // the stages with RECOMPUTE steps
		live      []float64 // the verifier's and simulator's PeakLive
		rTime     []float64 // the simulated time of a RECOMPUTE per stage (R = F = 1)
		words     string
	}{
		{name: "half-full-full-none", marked: []ir.Mark{{Layers: []int{1, 3}, Share: 0.5, Cost: 0.25}, {Share: 1, Cost: 1}, {Share: 1, Cost: 1}, {}},
			share: []float64{0.5, 0, 0, 0}, cost: []float64{0.25, 0, 0, 0}, layers: [][]int{{1, 3}, nil, nil, nil},
			recompute: []int{0, 1, 2}, live: []float64{2.5, 1, 1, 1}, rTime: []float64{0.25, 1, 1}},
		{name: "last-quarter", marked: []ir.Mark{{}, {}, {}, {Layers: []int{2}, Share: 0.25, Cost: 0.25}},
			share: []float64{0, 0, 0, 0.25}, layers: [][]int{nil, nil, nil, {2}}, recompute: []int{3}, live: []float64{4, 3, 2, 1}, rTime: []float64{3: 0.25}},
		{name: "stage-model", value: "selective:0=1,3=model", marked: []ir.Mark{{}, {}, {}, {Layers: []int{0, 2}, Share: 0.75, Cost: 0.5}},
			share: []float64{0, 0, 0, 0.75}, cost: []float64{0, 0, 0, 0.5}, layers: [][]int{nil, nil, nil, {0, 2}},
			recompute: []int{0, 3}, live: []float64{1, 3, 2, 1}, rTime: []float64{1, 3: 0.5}},
		{name: "no-model", words: "give -model FILE"},
		{name: "none-marked", marked: make([]ir.Mark, 4), words: "no stage holds a layer"},
		{name: "stage-unmarked", value: "selective:1=model", marked: []ir.Mark{{Share: 1, Cost: 1}, {}, {}, {}}, words: "-recompute selective:1=model: stage 1 holds no layer"},
		{name: "error", err: errors.New("no act"), words: "-recompute model: no act"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := schedules.Build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var marked func(int, int) ([]ir.Mark, error)
			if tc.marked != nil || tc.err != nil {
				marked = func(int, int) ([]ir.Mark, error) { return tc.marked, tc.err }
			}
			value := cmp.Or(tc.value, "model")
			q, _, err := Lower(p, Options{Marked: marked, Set: map[string]string{"recompute": value}})
			if tc.words != "" {
				if err == nil || !strings.Contains(err.Error(), tc.words) {
					t.Fatalf("error %v; want one saying %q", err, tc.words)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(q.RecomputeShare, tc.share) || !slices.Equal(q.RecomputeCost, tc.cost) || !slices.EqualFunc(q.RecomputeLayers, tc.layers, slices.Equal) {
				t.Errorf("RecomputeShare %v, Cost %v, Layers %v; want %v, %v, %v", q.RecomputeShare, q.RecomputeCost, q.RecomputeLayers, tc.share, tc.cost, tc.layers)
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
			for _, ev := range res.Events {
				if ev.Step.Kind == abi.Recompute {
					if d, want := ev.End-ev.Start, tc.rTime[ev.Step.Stage]; d != want {
						t.Errorf("%s takes %v; want %v (R 1 times the marked layers' share of it)", ev.Step, d, want)
					}
				}
			}
		})
	}
}
