package auto

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/pricing"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

// TestRecomputePolicies: the first k stages for k = 1, 2, 4, ..., then
// every stage.
func TestRecomputePolicies(t *testing.T) {
	for _, tc := range []struct {
		S    int
		want string
	}{
		{1, "full"},
		{2, "full:0 full"},
		{8, "full:0 full:0,1 full:0,1,2,3 full"},
		{6, "full:0 full:0,1 full:0,1,2,3 full"},
	} {
		if got := strings.Join(recomputePolicies(tc.S), " "); got != tc.want {
			t.Errorf("S=%d: %q, want %q", tc.S, got, tc.want)
		}
	}
}

// TestAutoRecompute pins the small row of issue 34 (BENCHMARKS.md,
// "Activation recompute"): P = 4, M = 8 at the default costs within one
// micro-batch of a rank's share, where no family fits (v-min, the least,
// holds 2): auto recomputes the stages of interleaved-zb V = 4 but its
// last rank's (greedyRecompute), 31.25, its lower bound 30.75 (every
// stage: 33); the program verifies, its memory is within the limit,
// and every candidate it lists with a policy is one that fits or says why.
// Without a limit, or with -recompute given, it tries no policy.
func TestAutoRecompute(t *testing.T) {
	cfg := ir.Config{Schedule: Name, Ranks: 4, Micro: 8}
	res, err := Lower(cfg, Options{MemLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	const want = "full:0,1,2,3,4,5,6,7,8,9,10,11"
	if res.Config.Schedule != "interleaved-zb" || res.Config.Virtual != 4 || res.Recompute != want {
		t.Errorf("chose %s V=%d -recompute %q, want interleaved-zb V=4 -recompute %s", res.Config.Schedule, res.Config.Virtual, res.Recompute, want)
	}
	if _, err := verify.Check(res.Program, verify.Options{}); err != nil {
		t.Errorf("the chosen program does not verify: %v", err)
	}
	_, mem, r := chosenOf(t, res)
	if mem > 1 || math.Abs(r-31.25) > 1e-9 {
		t.Errorf("memory %g, makespan %g; want within 1, 31.25", mem, r)
	}
	share, err := sim.DefaultCost().Resolve(0)
	if err != nil {
		t.Fatal(err)
	}
	vr, _, err := EvalShare(res.Result, share)
	if err != nil {
		t.Fatal(err)
	}
	perShare, err := pricing.PerShare(share, res.StagesPerShare())
	if err != nil {
		t.Fatal(err)
	}
	lb, err := sim.LowerBound(res.Program, perShare, sim.BoundOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lb > vr.Makespan || math.Abs(lb-30.75) > 1e-9 {
		t.Errorf("lower bound %g, makespan %g; want 30.75", lb, vr.Makespan)
	}
	recomputed := 0
	for _, c := range res.Candidates {
		if c.Recompute == "" {
			if c.Skipped == "" {
				t.Errorf("%s V=%d fits without recompute", c.Config.Schedule, c.Config.Virtual)
			}
			continue
		}
		recomputed++
		if c.Skipped == "" && c.ActMem > 1 {
			t.Errorf("%s V=%d -recompute %s: memory %g over the limit, not skipped", c.Config.Schedule, c.Config.Virtual, c.Recompute, c.ActMem)
		}
	}
	if recomputed == 0 {
		t.Error("no candidate with a recompute policy listed")
	}
	for _, opt := range []Options{{}, {MemLimit: 8}} {
		if opt.MemLimit > 0 {
			opt.Passes.Set = map[string]string{"recompute": "full:0"}
		}
		free, err := Lower(cfg, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range free.Candidates {
			if c.Recompute != "" {
				t.Errorf("limit %g, -recompute %q: candidate %s V=%d tried %s", opt.MemLimit, opt.Passes.Set["recompute"], c.Config.Schedule, c.Config.Virtual, c.Recompute)
			}
		}
	}
}

// chosenOf returns the chosen candidate of res, its memory and makespan.
func chosenOf(t *testing.T, res Result) (Candidate, float64, float64) {
	t.Helper()
	for _, c := range res.Candidates {
		if c.Skipped == "" && c.Config.Schedule == res.Config.Schedule && c.Config.Virtual == res.Config.Virtual && c.Recompute == res.Recompute && c.Swap == res.Swap {
			return c, c.ActMem, c.Makespan
		}
	}
	t.Fatalf("no candidate is the chosen %s V=%d -recompute %q", res.Config.Schedule, res.Config.Virtual, res.Recompute)
	return Candidate{}, 0, 0
}

// TestAutoRecomputeIdle pins the row where @idle placement wins
// (BENCHMARKS.md, "Activation recompute"): P = 4, M = 8 within 1.5, where
// no family fits (v-min holds 2): interleaved-zb V = 3 recomputing its
// first 8 stages takes 31 with each RECOMPUTE right before its backward
// and 30.33 with them moved into idle time, which auto chooses.
func TestAutoRecomputeIdle(t *testing.T) {
	res, err := Lower(ir.Config{Schedule: Name, Ranks: 4, Micro: 8}, Options{MemLimit: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	const policy = "full:0,1,2,3,4,5,6,7"
	if res.Config.Schedule != "interleaved-zb" || res.Config.Virtual != 3 || res.Recompute != policy+"@idle" {
		t.Fatalf("chose %s V=%d -recompute %q, want interleaved-zb V=3 -recompute %s@idle", res.Config.Schedule, res.Config.Virtual, res.Recompute, policy)
	}
	_, _, idle := chosenOf(t, res)
	latest := math.NaN()
	for _, c := range res.Candidates {
		if c.Config.Schedule == res.Config.Schedule && c.Config.Virtual == 3 && c.Recompute == policy {
			latest = c.Makespan
		}
	}
	if math.Abs(idle-91.0/3) > 1e-9 || math.Abs(latest-31) > 1e-9 {
		t.Errorf("@idle %g, latest %g; want 30.33, 31", idle, latest)
	}
}

// TestAutoRecomputeSelective pins the row where a selective policy wins
// (BENCHMARKS.md, "Auto choosing recompute under -mem"): P = 4, M = 8
// within 1.25, where full recompute of interleaved-zb V = 4's first 12
// stages takes 31.25 (TestAutoRecompute's choice within 1) and
// recomputing the last of them only three quarters fits as well:
// 30.9375 with @idle; the program verifies and holds 1.25 at most.
func TestAutoRecomputeSelective(t *testing.T) {
	res, err := Lower(ir.Config{Schedule: Name, Ranks: 4, Micro: 8}, Options{MemLimit: 1.25})
	if err != nil {
		t.Fatal(err)
	}
	const want = "selective:0=1,1=1,2=1,3=1,4=1,5=1,6=1,7=1,8=1,9=1,10=1,11=0.75@idle"
	if res.Config.Schedule != "interleaved-zb" || res.Config.Virtual != 4 || res.Recompute != want {
		t.Fatalf("chose %s V=%d -recompute %q, want interleaved-zb V=4 -recompute %s", res.Config.Schedule, res.Config.Virtual, res.Recompute, want)
	}
	rep, err := verify.Check(res.Program, verify.Options{})
	if err != nil {
		t.Fatalf("the chosen program does not verify: %v", err)
	}
	if res.Program.RecomputePart(11) != 0.75 || res.Program.RecomputePart(10) != 1 {
		t.Errorf("shares %v; want stage 11 at 0.75, the others whole", res.Program.RecomputeShare)
	}
	_, mem, r := chosenOf(t, res)
	if mem > 1.25+1e-9 || math.Abs(r-30.9375) > 1e-9 {
		t.Errorf("memory %g, makespan %g; want within 1.25, 30.9375 (verifier's peaks %v)", mem, r, rep.PeakLive)
	}
}

// marksModel is a model of 8 layers alternating an MLP (F 1, B 2, act 1)
// and an attention core (F 0.25, B 0.5, act 3: the activation-heavy,
// cheap-to-recompute part); with marked, every attention core says
// "recompute": true. Split in 4 stages of 2 layers, a stage's marked
// layer holds 3/4 of its act for 0.25/1.25 = 1/5 of its R.
func marksModel(t *testing.T, marked bool) model.Model {
	t.Helper()
	var ls []string
	for i := range 8 {
		if i%2 == 0 {
			ls = append(ls, fmt.Sprintf(`{"name": "mlp%d", "F": 1, "B": 2, "act": 1, "params": 0}`, i))
			continue
		}
		mark := ""
		if marked {
			mark = `, "recompute": true`
		}
		ls = append(ls, fmt.Sprintf(`{"name": "attn%d", "F": 0.25, "B": 0.5, "act": 3, "params": 0%s}`, i, mark))
	}
	m, err := model.Read(strings.NewReader(`{"layers": [` + strings.Join(ls, ", ") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestAutoRecomputeMarks: at P = 2, M = 4 within 16, where the fastest
// orders (dualpipe 24, dualpipev 20) are over the limit, auto's chooser
// recomputes the marked attention cores of dualpipev's fullest stages
// (selective:0=model,1=model: stage 0 and 1 re-run layer 1 of their two,
// dropping 3/4 of their act for 1/5 of their R, each RECOMPUTE taking the
// core's F, 0.25), which fits and is faster than the best the same model
// without marks reaches (there, recomputing a whole stage costs more than
// the synthesized order that fits). The program verifies. With
// -recompute model given (no limit), every candidate takes each split's
// marks; the model without marks then has no candidate.
func TestAutoRecomputeMarks(t *testing.T) {
	cfg := ir.Config{Schedule: Name, Ranks: 2, Micro: 4}
	const limit = 16
	sp := splitModel(marksModel(t, true), false)
	res, err := Lower(cfg, Options{Split: sp, MemLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	const want = "selective:0=model,1=model"
	if res.Config.Schedule != "dualpipev" || res.Recompute != want {
		t.Fatalf("chose %s V=%d -recompute %q; want dualpipev -recompute %s", res.Config.Schedule, res.Config.Virtual, res.Recompute, want)
	}
	p := res.Program
	if !slices.EqualFunc(p.RecomputeLayers, [][]int{{1}, {1}, nil, nil}, slices.Equal) || !slices.Equal(p.RecomputeShare, []float64{0.75, 0.75, 0, 0}) ||
		math.Abs(p.RecomputeCostPart(0)-0.2) > 1e-12 || math.Abs(p.RecomputeCostPart(1)-0.2) > 1e-12 {
		t.Errorf("layers %v, shares %v, costs %v; want [[1] [1] [] []], [0.75 0.75 0 0], 0.2 for stages 0 and 1", p.RecomputeLayers, p.RecomputeShare, p.RecomputeCost)
	}
	if _, err := verify.Check(p, verify.Options{}); err != nil {
		t.Errorf("the chosen program does not verify: %v", err)
	}
	c, err := sp.Pricing.Program(p, res.Layers, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sim.Run(p, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range r.Events {
		if ev.Step.Kind == abi.Recompute && ev.End-ev.Start != 0.25 {
			t.Errorf("%s takes %g; want the attention core's F, 0.25", ev.Step, ev.End-ev.Start)
		}
	}
	_, mem, marked := chosenOf(t, res)
	if mem > limit {
		t.Errorf("memory %g over the limit %d", mem, limit)
	}
	plain, err := Lower(cfg, Options{Split: splitModel(marksModel(t, false), false), MemLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ms := chosenOf(t, plain); !(marked < ms) || strings.Contains(plain.Recompute, "model") {
		t.Errorf("with marks %g; without, %s -recompute %q takes %g: want the marks faster", marked, plain.Config.Schedule, plain.Recompute, ms)
	}
	// (-recompute given under -mem runs synth's anneal with every
	// lowering: a minute; without -mem auto only compares the families)
	given := Options{Split: splitModel(marksModel(t, true), false)}
	given.Passes.Set = map[string]string{"recompute": "model"}
	res, err = Lower(cfg, given)
	if err != nil {
		t.Fatal(err)
	}
	if res.Program.RecomputeLayers == nil {
		t.Errorf("-recompute model: %s V=%d recomputes no marked layer", res.Config.Schedule, res.Config.Virtual)
	}
	given.Split = splitModel(marksModel(t, false), false)
	if _, err := Lower(cfg, given); err == nil || !strings.Contains(err.Error(), `no layer is marked "recompute": true`) {
		t.Errorf("-recompute model without marks: %v; want an error saying no layer is marked", err)
	}
}
