package auto

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/pricing"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
	"github.com/ppgen/ppgen/internal/long"
)

// TestAutoNeverWorseThanFixed: for several configs and cost models, the
// auto scheduler's choice simulates no slower than any family at its
// default V, each lowered and simulated here on its own.
func TestAutoNeverWorseThanFixed(t *testing.T) {
	costs := []string{"F=1,B=2,W=1", "F=1,B=2,W=1,comm=0.5", "F=1,B=3,W=2", "F=1,B=2,W=1,comm=0.01,act=1,bw=2"}
	for _, cfg := range []ir.Config{
		{Ranks: 2, Micro: 4}, {Ranks: 4, Micro: 8}, {Ranks: 4, Micro: 3}, {Ranks: 3, Micro: 9},
	} {
		for _, spec := range costs {
			c, err := sim.ParseCost(spec, 0)
			if err != nil {
				t.Fatal(err)
			}
			auto := cfg
			auto.Schedule = Name
			res, err := Lower(auto, Options{Cost: c})
			if err != nil {
				t.Fatalf("P=%d M=%d %s: %v", cfg.Ranks, cfg.Micro, spec, err)
			}
			got, _, err := EvalShare(res.Result, c)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range schedules.Names() {
				fixed := cfg
				fixed.Schedule = name
				fr, err := gen.Lower(fixed, gen.Options{})
				if err != nil {
					continue // not a candidate at this config
				}
				want, _, err := EvalShare(fr, c)
				if err != nil {
					t.Fatal(err)
				}
				if got.Makespan > want.Makespan*(1+1e-9) {
					t.Errorf("P=%d M=%d %s: auto chose %s V=%d with makespan %g, but %s V=%d makes %g",
						cfg.Ranks, cfg.Micro, spec, res.Config.Schedule, res.Config.Virtual, got.Makespan, name, fr.Config.Virtual, want.Makespan)
				}
			}
			if res.Config.Schedule == Name || len(res.Candidates) == 0 {
				t.Errorf("P=%d M=%d: result config %+v, %d candidates", cfg.Ranks, cfg.Micro, res.Config, len(res.Candidates))
			}
		}
	}
}

// TestAutoMemoryLimit: a limit excludes the candidates over it, the choice
// is the fastest of the rest, and a limit nothing meets is an error naming
// the smallest memory found.
func TestAutoMemoryLimit(t *testing.T) {
	cfg := ir.Config{Schedule: Name, Ranks: 4, Micro: 8}
	free, err := Lower(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var least = -1.0
	for _, c := range free.Candidates {
		if c.Skipped == "" && (least < 0 || c.ActMem < least) {
			least = c.ActMem
		}
	}
	var chosen Candidate
	for _, c := range free.Candidates {
		if c.Config.Schedule == free.Config.Schedule && c.Config.Virtual == free.Config.Virtual {
			chosen = c
		}
	}
	if chosen.ActMem <= least {
		t.Skipf("the unconstrained choice (%s, memory %g) already has the least memory", chosen.Config.Schedule, chosen.ActMem)
	}
	limit := least
	res, err := Lower(cfg, Options{MemLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	var best Candidate
	for _, c := range res.Candidates {
		if c.Config.Schedule == res.Config.Schedule && c.Config.Virtual == res.Config.Virtual {
			best = c
		}
	}
	if best.ActMem > limit {
		t.Errorf("limit %g: chose %s V=%d with memory %g", limit, best.Config.Schedule, best.Config.Virtual, best.ActMem)
	}
	for _, c := range res.Candidates {
		if c.Skipped == "" && c.ActMem <= limit && c.Makespan < best.Makespan*(1-1e-9) {
			t.Errorf("limit %g: chose makespan %g but %s V=%d fits with %g", limit, best.Makespan, c.Config.Schedule, c.Config.Virtual, c.Makespan)
		}
		if c.ActMem > limit && c.Skipped == "" {
			t.Errorf("%s V=%d: memory %g over the limit but not skipped", c.Config.Schedule, c.Config.Virtual, c.ActMem)
		}
	}
	// Below every family's memory only recompute fits (TestAutoRecompute).
	half, err := Lower(cfg, Options{MemLimit: least / 2})
	if err != nil {
		t.Fatalf("limit %g: %v", least/2, err)
	}
	if half.Recompute == "" {
		t.Errorf("limit %g: chose %s V=%d without recompute", least/2, half.Config.Schedule, half.Config.Virtual)
	}
}

// TestAutoDeterministic: the same config gives the same program.
func TestAutoDeterministic(t *testing.T) {
	cfg := ir.Config{Schedule: Name, Ranks: 4, Micro: 8}
	a, err := Lower(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Lower(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Config != b.Config || emit.Fingerprint(a.Program) != emit.Fingerprint(b.Program) {
		t.Errorf("two runs chose %+v and %+v", a.Config, b.Config)
	}
}

// TestAutoDeterministicWithModel: with a model (synthesis, whose local
// searches, rollouts and annealing run on all cores) auto chooses the
// same program on one core as on all of them, and again on a second run;
// the first case runs auto's default search and does not anneal, the
// second anneals (its progress says so). At M = 6 with budget 1 for the
// second case by default (its annealing, rollouts and reinsertion brief);
// in the long suite at M = 8 with budget 30.
func TestAutoDeterministicWithModel(t *testing.T) {
	m := model.Model{Layers: []model.Layer{{F: 0.3, I: 0.1, W: 0.3, Act: 1}}}
	for range 8 {
		m.Layers = append(m.Layers, model.Layer{F: 1, I: 1, W: 0.6, Act: 1})
	}
	m.Layers = append(m.Layers, model.Layer{F: 3, I: 3, W: 3, Act: 4})
	cfg := ir.Config{Schedule: Name, Ranks: 4, Micro: 6}
	annealBudget := 1
	if long.Enabled() {
		cfg.Micro, annealBudget = 8, 30
	}
	for _, tc := range []struct {
		mem    float64
		budget int
		anneal bool
	}{{6, 0, false}, {5, annealBudget, true}} {
		annealed := false
		opt := Options{Split: splitModel(m, true), MemLimit: tc.mem, Budget: tc.budget,
			Progress: func(step string, _, _ int) { annealed = annealed || strings.HasPrefix(step, "annealing") }}
		run := func(procs int) Result {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			r, err := Lower(cfg, opt)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		serial := run(1)
		for _, procs := range []int{4, 4} {
			r := run(procs)
			if r.Config.Schedule != serial.Config.Schedule || r.Config.Virtual != serial.Config.Virtual || emit.Fingerprint(r.Program) != emit.Fingerprint(serial.Program) {
				t.Errorf("M=%d mem %g: GOMAXPROCS %d chose %s V=%d, one core %s V=%d (or another order)", cfg.Micro, tc.mem, procs, r.Config.Schedule, r.Config.Virtual, serial.Config.Schedule, serial.Config.Virtual)
			}
		}
		if annealed != tc.anneal {
			t.Errorf("M=%d mem %g, budget %d: annealed %v, want %v", cfg.Micro, tc.mem, tc.budget, annealed, tc.anneal)
		}
		t.Logf("mem %g: chose %s V=%d", tc.mem, serial.Config.Schedule, serial.Config.Virtual)
	}
}

// TestAutoProgress: the callback sees every family built once, in
// order, then the bounds, then (with a model) every placement synthesized
// on, the balancing (-partition auto), the split's climb (-budget, -mem),
// the pilot and the local searches, one step each, then the lowering and
// recompute (-mem); done counts up from 0, and the last call's done is
// total-1: as many calls as the total says, on runs with and without a
// model (the pilot and the balancing were once left out of the total).
func TestAutoProgress(t *testing.T) {
	uniform := model.Model{}
	for range 8 {
		uniform.Layers = append(uniform.Layers, model.Layer{F: 1, I: 1, W: 1, Act: 1})
	}
	placements := []string{"synth(loop) V=1", "synth(loop) V=2", "synth(v) V=2", "synth(loop) V=4", "synth(zigzag) V=4"}
	for _, tc := range []struct {
		name   string
		split  *SplitModel
		synth  []string
		mem    float64
		budget int
		climb  bool
	}{
		{"no model", nil, nil, 0, 0, false},
		{"no model, mem", nil, nil, 1, 0, false},
		// P = 2 with 8 layers: every placement but zigzag V = 8 (16 stages).
		{"model", splitModel(uniform, false), placements, 0, 0, false},
		{"model, partition", splitModel(uniform, true), placements, 0, 0, false},
		// With -partition auto, -mem and -budget: the split's climb too.
		{"climb", splitModel(uniform, true), placements, 8, 100, true},
		// P = 4 on the LLM-like model: balancing moves a stage (it once
		// went uncounted, one call past the total).
		{"llm", splitModel(readExampleModel(t, "llm.json"), true), append(slices.Clone(placements), "synth(zigzag) V=8"), 0, 0, false},
	} {
		var seen []string
		last, lastTotal := -1, 0
		cfg := ir.Config{Schedule: Name, Ranks: 2, Micro: 4}
		if tc.name == "llm" {
			cfg.Ranks = 4
		}
		_, err := Lower(cfg, Options{Split: tc.split, MemLimit: tc.mem, Budget: tc.budget, Progress: func(step string, done, total int) {
			if done != len(seen) {
				t.Errorf("%s: progress %q done %d after %d calls", tc.name, step, done, len(seen))
			}
			seen = append(seen, step)
			last, lastTotal = done, total
		}})
		if err != nil {
			t.Fatal(err)
		}
		// want holds each step's prefix, its alternatives split by |.
		var want []string
		for _, n := range schedules.Names() {
			want = append(want, "building "+n)
		}
		want = append(want, "simulating ")
		for _, n := range tc.synth {
			want = append(want, "synthesizing "+n)
		}
		if tc.synth != nil && tc.split.Partition {
			want = append(want, "balancing the ranks of ")
		}
		if tc.climb {
			want = append(want, "climbing the split of ")
		}
		if tc.synth != nil {
			want = append(want, "annealing |rolling out |no order to roll out ", "improving ")
		}
		want = append(want, "lowering and simulating")
		if tc.mem > 0 {
			want = append(want, "trying recompute under the limit")
		}
		match := len(seen) == len(want)
		for i := 0; match && i < len(seen); i++ {
			match = slices.ContainsFunc(strings.Split(want[i], "|"), func(p string) bool { return strings.HasPrefix(seen[i], p) })
		}
		if !match {
			t.Errorf("%s: progress saw\n%q\nwant the prefixes\n%q", tc.name, seen, want)
		}
		if len(seen) != lastTotal || last != lastTotal-1 {
			t.Errorf("%s: %d calls, the last at done %d of total %d; want done = total-1 = calls-1", tc.name, len(seen), last, lastTotal)
		}
	}
}

// TestAutoPruningChoosesAsFull: the auto scheduler, which lowers only the
// candidates whose compute order is not already slower than the best
// lowered one, chooses what lowering and simulating every candidate would,
// reports the same figures for the candidates it lowered, and reports for
// the others a bound that the lowered program does not beat. At P = 2
// and 4 with M = P and 2P by default; P = 8 and M = 4P too in the long
// suite (under -mem, the recompute policies make each config cost seconds).
func TestAutoPruningChoosesAsFull(t *testing.T) {
	ranks, micros := []int{2, 4}, []int{1, 2}
	if long.Enabled() {
		ranks, micros = append(ranks, 8), append(micros, 4)
	}
	pruned := 0
	for _, P := range ranks {
		for _, k := range micros {
			M := k * P
			for _, costSpec := range []string{"", "overlap=1", "comm=0.3", "comm=1,W=0.5", "F=1,B=3,W=0.5,comm=0.2"} {
				for _, mem := range []float64{0, float64(P)} {
					cfg := ir.Config{Schedule: Name, Ranks: P, Micro: M}
					opt := Options{MemLimit: mem}
					c := sim.DefaultCost()
					if costSpec != "" {
						var err error
						if c, err = sim.ParseCost(costSpec, 0); err != nil {
							t.Fatal(err)
						}
						opt.Cost = c
					}
					name := fmt.Sprintf("P=%d M=%d cost %q mem %g", P, M, costSpec, mem)
					res, err := Lower(cfg, opt)
					// The full evaluation: every candidate lowered and simulated.
					type full struct {
						cand Candidate
						ok   bool
					}
					var all []full
					bestFull := -1
					for _, cand := range res.Candidates {
						if cand.Skipped != "" && cand.Skipped != NotLowered && cand.Makespan == 0 {
							continue // rejected by its family
						}
						fopt := Options{}
						if cand.Recompute != "" {
							fopt.Options = withRecompute(fopt.Options, cand.Recompute)
						}
						_, r, m, ferr := Evaluate(cand.Config, fopt, mustResolve(t, c))
						if ferr != nil {
							t.Fatalf("%s: %s V=%d: %v", name, cand.Config.Schedule, cand.Config.Virtual, ferr)
						}
						fc := Candidate{Config: cand.Config, Makespan: r.Makespan, Bubble: r.Bubble, ActMem: m, Recompute: cand.Recompute}
						ok := mem == 0 || m <= mem
						all = append(all, full{fc, ok})
						if ok && (bestFull < 0 || autoLess(fc, all[bestFull].cand)) {
							bestFull = len(all) - 1
						}
						switch cand.Skipped {
						case NotLowered:
							pruned++
							if cand.Makespan > r.Makespan+1e-9 {
								t.Errorf("%s: %s V=%d: bound %g over the lowered makespan %g", name, cand.Config.Schedule, cand.Config.Virtual, cand.Makespan, r.Makespan)
							}
						default:
							if cand.Makespan != r.Makespan || cand.ActMem != m {
								t.Errorf("%s: %s V=%d: reported makespan %g mem %g, lowered %g %g", name, cand.Config.Schedule, cand.Config.Virtual, cand.Makespan, cand.ActMem, r.Makespan, m)
							}
						}
					}
					if bestFull < 0 {
						if err == nil {
							t.Errorf("%s: auto chose %s, the full evaluation nothing", name, res.Config.Schedule)
						}
						continue
					}
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if want := all[bestFull].cand; res.Config.Schedule != want.Config.Schedule || res.Config.Virtual != want.Config.Virtual || res.Recompute != want.Recompute {
						t.Errorf("%s: auto chose %s V=%d -recompute %q, the full evaluation %s V=%d -recompute %q", name, res.Config.Schedule, res.Config.Virtual, res.Recompute, want.Config.Schedule, want.Config.Virtual, want.Recompute)
					}
				}
			}
		}
	}
	if pruned == 0 {
		t.Error("no candidate was pruned: the test shows nothing")
	}
	t.Logf("P in %v: %d candidates pruned", ranks, pruned)
}

// totalAct is the activation memory of one micro-batch of the whole model
// (a rank's share at P ranks is totalAct/P).
func totalAct(m model.Model) float64 {
	act := 0.0
	for _, l := range m.Layers {
		act += l.Act
	}
	return act
}

func mustResolve(t *testing.T, c sim.Cost) sim.Cost {
	t.Helper()
	c, err := c.Resolve(0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAutoStageCost: with Options.StageCost every candidate is
// simulated by the cost of its own stages (a model split into them);
// candidates it refuses are skipped, and the choice is the best of a full
// evaluation under the same costs.
func TestAutoStageCost(t *testing.T) {
	// Four "layers": 0.5, 1, 1, 3 (F; B twice that), split evenly.
	layers := []float64{0.5, 1, 1, 3}
	stageCost := func(stages, copies int) (sim.Cost, error) {
		per := stages / copies
		if per > len(layers) || per < 1 {
			return sim.Cost{}, fmt.Errorf("%d layers cannot fill %d stages", len(layers), per)
		}
		c := sim.DefaultCost()
		c.F, c.B, c.I, c.W = nil, nil, nil, nil
		for range copies {
			for s := range per {
				lo, hi := s*len(layers)/per, (s+1)*len(layers)/per
				f := 0.0
				for _, v := range layers[lo:hi] {
					f += v
				}
				c.F, c.B, c.I, c.W = append(c.F, f), append(c.B, 2*f), append(c.I, f), append(c.W, f)
			}
		}
		return c.Resolve(stages)
	}
	opt := Options{StageCost: stageCost}
	res, err := Lower(ir.Config{Schedule: Name, Ranks: 2, Micro: 4}, opt)
	if err != nil {
		t.Fatal(err)
	}
	best := -1.0
	for _, cand := range res.Candidates {
		if cand.Config.Virtual > 2 && cand.Skipped == "" {
			t.Errorf("%s V=%d: %d stages of 4 layers, but not skipped", cand.Config.Schedule, cand.Config.Virtual, 2*cand.Config.Virtual)
		}
		if cand.Skipped != "" && cand.Skipped != NotLowered {
			continue
		}
		_, r, _, err := Evaluate(cand.Config, opt, sim.DefaultCost())
		if err != nil {
			t.Fatalf("%s V=%d: %v", cand.Config.Schedule, cand.Config.Virtual, err)
		}
		if best < 0 || r.Makespan < best {
			best = r.Makespan
		}
	}
	sc, err := stageCost(res.Program.Stages(), max(res.Program.Copies, 1))
	if err != nil {
		t.Fatal(err)
	}
	got, err := sim.Run(res.Program, sc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Makespan != best {
		t.Errorf("auto chose %s V=%d, makespan %g; the best candidate's is %g", res.Config.Schedule, res.Config.Virtual, got.Makespan, best)
	}
}

// TestAutoNoneNamesPartition: when nothing fits the limit with a model
// split evenly only, the error also names -partition auto; with
// -partition auto given, or without a model, it does not. Above the
// floor auto runs with budget 1: whether it finds an order does not
// depend on the budget, only how long it searches.
func TestAutoNoneNamesPartition(t *testing.T) {
	m := readExampleModel(t, "llm.json")
	cfg := ir.Config{Schedule: Name, Ranks: 4, Micro: 8}
	noRecompute := gen.Options{Passes: passes.Options{Set: map[string]string{"recompute": "none"}}}
	for _, tc := range []struct {
		split *SplitModel
		want  bool
	}{
		{splitModel(m, false), true},
		{splitModel(m, true), false},
		{nil, false},
	} {
		limit := 1.0 // below one micro-batch of any rank's share, in either unit
		// -recompute none: auto tries no policy (with one, memory goes
		// below the synthesized orders' floor: TestAutoRecompute)
		_, err := Lower(cfg, Options{Options: noRecompute, MemLimit: limit, Split: tc.split})
		if err == nil || !strings.Contains(err.Error(), "no schedule fits the activation memory limit 1") {
			t.Fatalf("split %v: err = %v", tc.split != nil, err)
		}
		if got := strings.Contains(err.Error(), "-partition auto"); got != tc.want {
			t.Errorf("model %v, partition %v: names -partition auto %v, want %v: %v", tc.split != nil, tc.split != nil && tc.split.Partition, got, tc.want, err)
		}
		if got := strings.Contains(err.Error(), "needs at least"); got != tc.want {
			t.Errorf("model %v, partition %v: gives the synthesized orders' floor %v, want %v: %v", tc.split != nil, tc.split != nil && tc.split.Partition, got, tc.want, err)
		}
	}
	// The floor: just under it nothing fits, at twice it auto finds an order
	// of its own below the smallest family's memory.
	floor, pk, ok := oneMicroFloor(cfg, splitModel(m, false))
	if !ok {
		t.Fatal("no floor")
	}
	if _, err := Lower(cfg, Options{Options: noRecompute, MemLimit: floor * 0.999, Split: splitModel(m, false)}); err == nil {
		t.Errorf("limit %g, under the floor %g (%s V=%d): an order fits", floor*0.999, floor, pk.name, pk.virtual)
	}
	res, err := Lower(cfg, Options{Options: noRecompute, MemLimit: 2 * floor, Budget: 1, Split: splitModel(m, false)})
	if err != nil || !IsSynthesized(res.Config.Schedule) {
		t.Errorf("limit %g, twice the floor: %s, %v; want a synthesized order", 2*floor, res.Config.Schedule, err)
	}
}

// TestAutoSynthesizesOnAPlacedSplit: the LLM-like model within two
// micro-batches of a rank's share. No family's split, even or its own
// partition, lets an order beat the best family there (at P = 4, M = 8,
// 18.5: v-min with its partition); partition.Placed's split, which
// balances the ranks' work and then their chunks' activation-time, does:
// auto's choice is synthesized on a split that is neither the even one
// nor any family's, and faster than every family within the limit.
// By default at P = 3, M = 6 with budget 1 (without Placed's split auto
// chooses an order on the even split there); in the long suite at P = 4,
// M = 8 with auto's default search. Without recompute (-recompute none):
// at P = 3 dualpipev V = 2 recomputing stages 0, 1, 3 whole and a quarter
// of stage 2 (selective) takes 233.1, under the synthesized order's 234.6.
func TestAutoSynthesizesOnAPlacedSplit(t *testing.T) {
	m := readExampleModel(t, "llm.json")
	cfg, budget := ir.Config{Schedule: Name, Ranks: 3, Micro: 6}, 1
	if long.Enabled() {
		cfg, budget = ir.Config{Schedule: Name, Ranks: 4, Micro: 8}, 0
	}
	limit := 2 * totalAct(m) / float64(cfg.Ranks)
	noRecompute := gen.Options{Passes: passes.Options{Set: map[string]string{"recompute": "none"}}}
	res, err := Lower(cfg, Options{Options: noRecompute, MemLimit: limit, Budget: budget, Split: splitModel(m, true)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("P=%d M=%d within %g", cfg.Ranks, cfg.Micro, limit)
	if !IsSynthesized(res.Config.Schedule) {
		t.Fatalf("auto chose %s V=%d; want a synthesized order", res.Config.Schedule, res.Config.Virtual)
	}
	sp := splitModel(m, false)
	r, _, err := sp.run(res.Program, model.Partition{Bounds: res.Layers})
	if err != nil {
		t.Fatal(err)
	}
	pl := res.Program.Placement
	placed, err := partition.Placed(m, pl)
	if err != nil {
		t.Fatal(err)
	}
	even, _ := model.Even(len(m.Layers), pl.Stages())
	if slices.Equal(res.Layers, even.Bounds) {
		t.Errorf("auto's split %v is the even one", res.Layers)
	}
	if !slices.Equal(res.Layers, placed.Bounds) {
		t.Logf("auto's split %v, Placed's %v (the -partition auto step moved it)", res.Layers, placed.Bounds)
	}
	for _, c := range res.Candidates {
		if c.Synthesized || c.Skipped != "" && c.Skipped != NotLowered || math.IsInf(c.Makespan, 1) {
			continue
		}
		if c.Layers != nil && slices.Equal(c.Layers, res.Layers) {
			t.Errorf("auto's split %v is %s V=%d's", res.Layers, c.Config.Schedule, c.Config.Virtual)
		}
		if c.Makespan <= r.Makespan {
			t.Errorf("%s V=%d (partitioned %v) %g, not above auto's %g", c.Config.Schedule, c.Config.Virtual, c.Partitioned, c.Makespan, r.Makespan)
		}
	}
	t.Logf("auto: %s V=%d %g on %v", res.Config.Schedule, res.Config.Virtual, r.Makespan, res.Layers)
}

// TestClimbSplit: on the LLM-like model at P = 4 within 18.5, on the
// zigzag with V = 8, climbing partition.Placed's split finds an order
// faster than synthesize's for that split (which is where it starts, so
// it is never slower); the order verifies, keeps the limit, and the climb
// is deterministic. At M = 4 with 10 syntheses by default, at M = 8 with
// 40 in the long suite.
func TestClimbSplit(t *testing.T) {
	m := readExampleModel(t, "llm.json")
	cfg, n := ir.Config{Ranks: 4, Micro: 4}, 10
	if long.Enabled() {
		cfg.Micro, n = 8, 40
	}
	pl := ir.Zigzag(4, 8)
	sp := splitModel(m, true)
	part, err := partition.Placed(m, pl)
	if err != nil {
		t.Fatal(err)
	}
	start, err := synthesize(cfg, sp, pl, part, 18.5)
	if err != nil || start == nil {
		t.Fatalf("%v, %v", start, err)
	}
	f, err := climbSplit(cfg, sp, pl, part, 18.5, n)
	if err != nil || f == nil {
		t.Fatalf("%v, %v", f, err)
	}
	if f.ms >= start.ms {
		t.Errorf("M=%d, %d syntheses: climbed %g on %v, not below the start's %g on %v", cfg.Micro, n, f.ms, f.part.Bounds, start.ms, part.Bounds)
	}
	if _, err := verify.Check(f.prog, verify.Options{}); err != nil {
		t.Error(err)
	}
	if _, mem, err := sp.run(f.prog, f.part); err != nil || mem > 18.5*(1+1e-9) {
		t.Errorf("memory %g, %v; want at most 18.5", mem, err)
	}
	again, err := climbSplit(cfg, sp, pl, part, 18.5, n)
	if err != nil || again == nil || again.ms != f.ms || !slices.Equal(again.part.Bounds, f.part.Bounds) {
		t.Errorf("not deterministic: %v then %v", f.part.Bounds, again)
	}
	t.Logf("%g on %v → %g on %v", start.ms, part.Bounds, f.ms, f.part.Bounds)
}

// readExampleModel reads a model description of examples/models.
func readExampleModel(t *testing.T, name string) model.Model {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "examples", "models", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := model.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// splitModel is the SplitModel of m priced by its own layers.
func splitModel(m model.Model, partition bool) *SplitModel {
	return &SplitModel{Model: m, Pricing: pricing.OfModel(m), Partition: partition}
}
