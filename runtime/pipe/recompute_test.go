package pipe_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// recomputeExec is one rank holding one stage, which recomputes when
// recompute is set (Spec.Recompute).
func recomputeExec(t *testing.T, st *affine, recompute bool) *pipe.Exec {
	t.Helper()
	sp := pipe.Spec{Schedule: "test-recompute", Ranks: 1, Stages: 1, Micro: 2, Slots: []int{2}, RankOf: []int{0}, Fingerprint: "test:recompute"}
	if recompute {
		sp.Recompute = []int{0}
	}
	x, err := pipe.New(pipe.Config{Rank: 0, Spec: sp, Stages: map[int]pipe.Stage{0: st}, Loss: mse{}, Data: &data{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

func op(k pipe.OpKind, micro, slot int) pipe.Op {
	return pipe.Op{Kind: k, Stage: 0, Micro: int32(micro), Peer: -1, Slot: int32(slot), Src: -1}
}

// TestRecompute: with Spec.Recompute an F keeps only the input and
// RECOMPUTE runs the Forward again before the backward, which then gets
// the same losses and parameters as without; each misuse fails the step
// with its reason, and Spec.Validate refuses a stage out of range or
// out of order.
func TestRecompute(t *testing.T) {
	plain := []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpForward, 0, 0), op(pipe.OpDataLoad, 1, 1), op(pipe.OpForward, 1, 1),
		op(pipe.OpBackward, 0, 0), op(pipe.OpBackward, 1, 1), optOp}
	re := []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpForward, 0, 0), op(pipe.OpDataLoad, 1, 1), op(pipe.OpForward, 1, 1),
		op(pipe.OpRecompute, 0, 0), op(pipe.OpBackward, 0, 0), op(pipe.OpRecompute, 1, 1), op(pipe.OpBackward, 1, 1), optOp}
	a, b := &affine{A: 0.5, B: 0.1}, &affine{A: 0.5, B: 0.1}
	xa, xb := recomputeExec(t, a, false), recomputeExec(t, b, true)
	for range 2 {
		if err := pipe.Run(xa, func(x *pipe.Exec) error { return pipe.Interpret(x, plain) }); err != nil {
			t.Fatal(err)
		}
		if err := pipe.Run(xb, func(x *pipe.Exec) error { return pipe.Interpret(x, re) }); err != nil {
			t.Fatal(err)
		}
		if la, lb := xa.Losses(), xb.Losses(); la[0] != lb[0] || la[1] != lb[1] {
			t.Errorf("losses %v with recompute, %v without", lb, la)
		}
	}
	if a.A != b.A || a.B != b.B || b.FwdCalls != 2*a.FwdCalls {
		t.Errorf("params (%v, %v) with recompute, (%v, %v) without; Forward calls %d, %d", b.A, b.B, a.A, a.B, b.FwdCalls, a.FwdCalls)
	}
	for _, tc := range []struct {
		name      string
		recompute bool
		ops       []pipe.Op
		words     string
	}{
		{"a stage that does not recompute", false, []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpForward, 0, 0), op(pipe.OpRecompute, 0, 0)}, "stage 0 does not recompute"},
		{"before its F", true, []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpRecompute, 0, 0)}, "RECOMPUTE follows the chunk's F"},
		{"twice", true, []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpForward, 0, 0), op(pipe.OpRecompute, 0, 0), op(pipe.OpRecompute, 0, 0)}, "a second RECOMPUTE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := recomputeExec(t, &affine{A: 1}, tc.recompute)
			err := pipe.Run(x, func(x *pipe.Exec) error { return pipe.Interpret(x, tc.ops) })
			if err == nil || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("got %v; want an error saying %q", err, tc.words)
			}
		})
	}
	for _, rc := range [][]int{{1}, {-1}, {0, 0}} {
		sp := pipe.Spec{Schedule: "s", Ranks: 1, Stages: 1, Micro: 1, Slots: []int{1}, RankOf: []int{0}, Recompute: rc}
		if err := sp.Validate(); err == nil || !strings.Contains(err.Error(), "Recompute") {
			t.Errorf("Recompute %v: %v", rc, err)
		}
	}
}

// halfAffine is an affine stage that is a pipe.Recomputable: Drop keeps
// the input (its saved context is the input, so it keeps no less, but it
// counts the calls) and Rebuild returns it, or fails when fail is set.
type halfAffine struct {
	*affine
	drops, rebuilds int
	fail            error
	share           float64 // what Select got
	layers          []int
}

type halfKept struct{ x any }

func (h *halfAffine) Select(share float64, layers []int) error {
	h.share, h.layers = share, layers
	return nil
}

func (h *halfAffine) Drop(x *tensor.Dense, saved any) (any, error) {
	h.drops++
	if h.fail != nil {
		return nil, h.fail
	}
	if h.share != 0.5 {
		return nil, fmt.Errorf("share %v, want 0.5", h.share)
	}
	return halfKept{saved}, nil
}

func (h *halfAffine) Rebuild(kept any) (any, error) {
	h.rebuilds++
	return kept.(halfKept).x, nil
}

// TestRecomputeSelective: with Spec.RecomputeShare a Recomputable stage's
// F keeps what Drop returns and RECOMPUTE calls Rebuild instead of
// Forward; the losses and parameters equal training without recompute,
// and the Exec's measured PeakLive counts the kept share (F0 F1 R0 B0 R1
// B1: 2 chunks without recompute, 1.5 with half of each kept, 1 with full
// recompute). A Drop that fails fails the F; Spec.Validate refuses a
// RecomputeShare of the wrong length or outside [0, 1].
func TestRecomputeSelective(t *testing.T) {
	plain := []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpForward, 0, 0), op(pipe.OpDataLoad, 1, 1), op(pipe.OpForward, 1, 1),
		op(pipe.OpBackward, 0, 0), op(pipe.OpBackward, 1, 1), optOp}
	re := []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpForward, 0, 0), op(pipe.OpDataLoad, 1, 1), op(pipe.OpForward, 1, 1),
		op(pipe.OpRecompute, 0, 0), op(pipe.OpBackward, 0, 0), op(pipe.OpRecompute, 1, 1), op(pipe.OpBackward, 1, 1), optOp}
	exec := func(st pipe.Stage, recompute []int, share []float64) *pipe.Exec {
		sp := pipe.Spec{Schedule: "test-recompute", Ranks: 1, Stages: 1, Micro: 2, Slots: []int{2}, RankOf: []int{0},
			Fingerprint: "test:recompute", Recompute: recompute, RecomputeShare: share}
		x, err := pipe.New(pipe.Config{Rank: 0, Spec: sp, Stages: map[int]pipe.Stage{0: st}, Loss: mse{}, Data: &data{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		return x
	}
	a := &affine{A: 0.5, B: 0.1}
	h := &halfAffine{affine: &affine{A: 0.5, B: 0.1}}
	f := &affine{A: 0.5, B: 0.1}
	xa, xh, xf := exec(a, nil, nil), exec(h, []int{0}, []float64{0.5}), exec(f, []int{0}, nil)
	for range 2 {
		for _, run := range []struct {
			x   *pipe.Exec
			ops []pipe.Op
		}{{xa, plain}, {xh, re}, {xf, re}} {
			if err := pipe.Run(run.x, func(x *pipe.Exec) error { return pipe.Interpret(x, run.ops) }); err != nil {
				t.Fatal(err)
			}
		}
		if la, lh := xa.Losses(), xh.Losses(); la[0] != lh[0] || la[1] != lh[1] {
			t.Errorf("losses %v with selective recompute, %v without", lh, la)
		}
	}
	if a.A != h.A || a.B != h.B || h.FwdCalls != a.FwdCalls || h.drops != 4 || h.rebuilds != 4 {
		t.Errorf("params (%v, %v) selective, (%v, %v) without; Forward calls %d, %d; Drop %d, Rebuild %d (want 4 each)", h.A, h.B, a.A, a.B, h.FwdCalls, a.FwdCalls, h.drops, h.rebuilds)
	}
	if pa, ph, pf := xa.PeakLive(), xh.PeakLive(), xf.PeakLive(); pa != 2 || ph != 1.5 || pf != 1 {
		t.Errorf("measured peaks %v without, %v selective, %v full; want 2, 1.5, 1", pa, ph, pf)
	}
	bad := &halfAffine{affine: &affine{A: 1}, fail: errors.New("no room")}
	x := exec(bad, []int{0}, []float64{0.5})
	if err := pipe.Run(x, func(x *pipe.Exec) error { return pipe.Interpret(x, re) }); err == nil || !strings.Contains(err.Error(), "selective recompute: no room") {
		t.Errorf("a failing Drop: %v", err)
	}
	for _, share := range [][]float64{{0.5, 0.5}, {-0.5}, {1.5}, {math.NaN()}} {
		sp := pipe.Spec{Schedule: "s", Ranks: 1, Stages: 1, Micro: 1, Slots: []int{1}, RankOf: []int{0}, Recompute: []int{0}, RecomputeShare: share}
		if err := sp.Validate(); err == nil || !strings.Contains(err.Error(), "RecomputeShare") {
			t.Errorf("RecomputeShare %v: %v", share, err)
		}
	}
}

// TestTimelineRecordsRecompute: a Timeline records each RECOMPUTE as an R
// call of its own (not an F), whole or selective, and its trace names it
// by its step ("0R1", args.kind "R"), the F calls keeping their
// micro-batches; its otherData gives gen/tune the share of the stage's R
// the R calls re-ran (recompute_cost) where a Recomputable stage rebuilt
// a share, none where the stage re-ran Forward (full, or a stage without
// Recomputable under a share), and names a stage whose share is of the
// layers RecomputeLayers lists and the Spec holds no RecomputeCost
// (recompute_cost_unknown); with one, its share.
func TestTimelineRecordsRecompute(t *testing.T) {
	re := []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpForward, 0, 0), op(pipe.OpDataLoad, 1, 1), op(pipe.OpForward, 1, 1),
		op(pipe.OpRecompute, 1, 1), op(pipe.OpBackward, 1, 1), op(pipe.OpRecompute, 0, 0), op(pipe.OpBackward, 0, 0), optOp}
	for _, tc := range []struct {
		name       string
		stage      pipe.Stage
		share      []float64
		cost       []float64
		layers     [][]int
		other, not string
	}{
		{"full", &affine{A: 0.5}, nil, nil, nil, `"otherData":{"schedule":"test","source":"measured (pipe.Timeline)"}`, "recompute_cost"},
		{"selective", &halfAffine{affine: &affine{A: 0.5}}, []float64{0.5}, nil, nil, `"recompute_cost":[0.5]`, "recompute_cost_unknown"},
		{"selective, re-run whole", &affine{A: 0.5}, []float64{0.5}, nil, nil, `"source":"measured (pipe.Timeline)"}`, "recompute_cost"},
		{"marked", &halfAffine{affine: &affine{A: 0.5}}, []float64{0.5}, nil, [][]int{{0}}, `"recompute_cost":[1],"recompute_cost_unknown":[0]`, "recompute_cost\":[0.5]"},
		{"marked, with its cost", &halfAffine{affine: &affine{A: 0.5}}, []float64{0.5}, []float64{0.25}, [][]int{{0}}, `"recompute_cost":[0.25]`, "recompute_cost_unknown"},
		{"marked, re-run whole", &affine{A: 0.5}, []float64{0.5}, []float64{0.25}, [][]int{{0}}, `"source":"measured (pipe.Timeline)"}`, "recompute_cost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := &pipe.Timeline{}
			sp := pipe.Spec{Schedule: "test-recompute", Ranks: 1, Stages: 1, Micro: 2, Slots: []int{2}, RankOf: []int{0},
				Fingerprint: "test:recompute", Recompute: []int{0}, RecomputeShare: tc.share, RecomputeLayers: tc.layers, RecomputeCost: tc.cost}
			x, err := pipe.New(pipe.Config{Rank: 0, Spec: sp, Stages: map[int]pipe.Stage{0: tc.stage}, Loss: mse{}, Data: &data{}, Timeline: tl})
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			if err := pipe.Run(x, func(x *pipe.Exec) error { return pipe.Interpret(x, re) }); err != nil {
				t.Fatal(err)
			}
			count := map[byte]int{}
			for _, e := range tl.Events() {
				count[e.Kind]++
			}
			if count['F'] != 2 || count['R'] != 2 || count['I'] != 2 || count['W'] != 2 {
				t.Errorf("calls by kind %v; want 2 each of F, R, I, W", count)
			}
			var buf strings.Builder
			if err := tl.WriteTrace(&buf, "test", [][]pipe.Op{re}); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{`"name":"0R1"`, `"name":"0R0"`, `"name":"0F1"`, `"kind":"R"`, tc.other} {
				if !strings.Contains(buf.String(), want) {
					t.Errorf("the trace lacks %s:\n%s", want, buf.String())
				}
			}
			if strings.Contains(buf.String(), tc.not) {
				t.Errorf("the trace holds %s:\n%s", tc.not, buf.String())
			}
		})
	}
}

// refusing is a Recomputable whose Select refuses every selection.
type refusing struct{ *halfAffine }

func (refusing) Select(float64, []int) error { return errors.New("has 1 layer") }

// TestRecomputeLayersSpec: New gives a Recomputable stage its share and
// its Spec.RecomputeLayers entry through Select (a stage with a list of
// layers recomputes selectively even at share 1), fails when Select
// refuses them, and Spec.Validate refuses a list of the wrong length, out
// of order, negative or for a stage that does not recompute.
func TestRecomputeLayersSpec(t *testing.T) {
	spec := func(rc []int, share []float64, layers [][]int) pipe.Spec {
		return pipe.Spec{Schedule: "test-recompute", Ranks: 1, Stages: 1, Micro: 2, Slots: []int{2}, RankOf: []int{0},
			Fingerprint: "test:recompute", Recompute: rc, RecomputeShare: share, RecomputeLayers: layers}
	}
	h := &halfAffine{affine: &affine{A: 0.5}}
	x, err := pipe.New(pipe.Config{Rank: 0, Spec: spec([]int{0}, []float64{0.5}, [][]int{{1, 3}}), Stages: map[int]pipe.Stage{0: h}, Loss: mse{}, Data: &data{}})
	if err != nil {
		t.Fatal(err)
	}
	x.Close()
	if h.share != 0.5 || !slices.Equal(h.layers, []int{1, 3}) {
		t.Errorf("Select got share %v, layers %v; want 0.5, [1 3]", h.share, h.layers)
	}
	h = &halfAffine{affine: &affine{A: 0.5}}
	if x, err = pipe.New(pipe.Config{Rank: 0, Spec: spec([]int{0}, nil, [][]int{{2}}), Stages: map[int]pipe.Stage{0: h}, Loss: mse{}, Data: &data{}}); err != nil {
		t.Fatal(err)
	}
	x.Close()
	if h.share != 1 || !slices.Equal(h.layers, []int{2}) {
		t.Errorf("share 1 with layers: Select got share %v, layers %v; want 1, [2]", h.share, h.layers)
	}
	_, err = pipe.New(pipe.Config{Rank: 0, Spec: spec([]int{0}, []float64{0.5}, [][]int{{1}}), Stages: map[int]pipe.Stage{0: refusing{&halfAffine{affine: &affine{}}}}, Loss: mse{}, Data: &data{}})
	if err == nil || !strings.Contains(err.Error(), "stage 0") || !strings.Contains(err.Error(), "refuses its selective recompute") || !strings.Contains(err.Error(), "has 1 layer") {
		t.Errorf("a refused Select: %v", err)
	}
	for _, tc := range []struct {
		rc     []int
		layers [][]int
		words  string
	}{
		{[]int{0}, [][]int{{1}, {2}}, "len(RecomputeLayers) = 2"},
		{[]int{0}, [][]int{{2, 1}}, "want increasing layer indices"},
		{[]int{0}, [][]int{{-1}}, "want increasing layer indices"},
		{[]int{0}, [][]int{{1, 1}}, "want increasing layer indices"},
		{nil, [][]int{{1}}, "stage 0 is not in Recompute"},
	} {
		if err := spec(tc.rc, nil, tc.layers).Validate(); err == nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("RecomputeLayers %v: %v; want %q", tc.layers, err, tc.words)
		}
	}
}

// TestRecomputeCostSpec: Validate takes a Spec.RecomputeCost of one share
// of the stage's R in (0, 1] per stage, and refuses one of another length
// or with a share outside (0, 1], naming the field and the entry.
func TestRecomputeCostSpec(t *testing.T) {
	for _, tc := range []struct {
		cost  []float64
		words string // "": valid
	}{
		{nil, ""},
		{[]float64{0.25}, ""},
		{[]float64{1}, ""},
		{[]float64{}, "len(RecomputeCost) = 0, want Stages = 1"},
		{[]float64{0.5, 0.5}, "len(RecomputeCost) = 2, want Stages = 1"},
		{[]float64{0}, "RecomputeCost[0] = 0, want a share of the stage's R in (0, 1]"},
		{[]float64{-0.5}, "RecomputeCost[0] = -0.5"},
		{[]float64{1.5}, "RecomputeCost[0] = 1.5"},
		{[]float64{math.NaN()}, "RecomputeCost[0] = NaN"},
		{[]float64{math.Inf(1)}, "RecomputeCost[0] = +Inf"},
	} {
		sp := pipe.Spec{Schedule: "s", Ranks: 1, Stages: 1, Micro: 1, Slots: []int{1}, RankOf: []int{0}, Recompute: []int{0},
			RecomputeShare: []float64{0.5}, RecomputeLayers: [][]int{{1}}, RecomputeCost: tc.cost}
		err := sp.Validate()
		switch {
		case tc.words == "" && err != nil:
			t.Errorf("RecomputeCost %v: %v; want it valid", tc.cost, err)
		case tc.words != "" && (err == nil || !strings.Contains(err.Error(), tc.words)):
			t.Errorf("RecomputeCost %v: %v; want an error containing %q", tc.cost, err, tc.words)
		}
	}
}
