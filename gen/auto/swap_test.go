package auto

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
	"github.com/ppgen/ppgen/internal/long"
)

// swapCost is the default cost with each swap transfer taking swap.
func swapCost(swap float64) sim.Cost {
	c := sim.DefaultCost()
	c.Swap = swap
	return c
}

// TestAutoSwap: P = 4, M = 8 within 2 (a rank's share of two
// micro-batches; of the families only v-min fits, 29.5) with swap
// transfers of 0.5 (a V = 2 stage's F). Without -swap auto the best is
// dualpipev V = 2 recomputing, 28, the best of the candidates it lists
// without swap; with it, dualpipev V = 2 swapping every chunk 4 or more
// compute steps from its backward, 22.5, faster than every candidate
// without swap. The chosen program verifies with the verifier's memory
// (its peak live chunks over V) within the limit, is the program -swap 4
// gives for that family, and its swap distance is one
// passes.SwapDistances lists for the order.
func TestAutoSwap(t *testing.T) {
	res, err := Lower(ir.Config{Schedule: Name, Ranks: 4, Micro: 8}, Options{MemLimit: 2, Cost: swapCost(0.5), SwapAuto: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.Schedule != "dualpipev" || res.Config.Virtual != 2 || res.Swap != 4 || res.Recompute != "" {
		t.Fatalf("chose %s V=%d -swap %d -recompute %q, want dualpipev V=2 -swap 4", res.Config.Schedule, res.Config.Virtual, res.Swap, res.Recompute)
	}
	c, mem, span := chosenOf(t, res)
	if math.Abs(span-22.5) > 1e-9 || mem > 2 {
		t.Errorf("makespan %g, memory %g; want 22.5 within 2", span, mem)
	}
	// Every candidate without swap that fits (v-min, the recompute ones)
	// is slower.
	noSwap := math.Inf(1)
	for _, c := range res.Candidates {
		if c.Skipped == "" && c.Swap == 0 {
			noSwap = min(noSwap, c.Makespan)
		}
	}
	if math.Abs(noSwap-28) > 1e-9 {
		t.Errorf("the best candidate without swap takes %g, want 28", noSwap)
	}
	rep, err := verify.Check(res.Program, verify.Options{})
	if err != nil {
		t.Fatalf("the chosen program does not verify: %v", err)
	}
	if peak := slices.Max(rep.PeakLive) / float64(res.StagesPerShare()); peak > 2+1e-9 {
		t.Errorf("the verifier counts %g of a share live (%v chunks per rank), over the limit 2", peak, rep.PeakLive)
	}
	if !slices.ContainsFunc(res.Program.Ranks[0], func(s ir.Step) bool { return s.Kind == ir.SwapLaunchOffload }) {
		t.Errorf("rank 0 swaps nothing")
	}
	if !slices.Contains(passes.SwapDistances(res.Compute), res.Swap) {
		t.Errorf("-swap %d is not among the order's distances %v", res.Swap, passes.SwapDistances(res.Compute))
	}
	// The same program as the family lowered with -swap 4 given, and
	// the candidate reports its distance.
	opt := Options{}
	opt.Passes.Swap = 4
	share, err := swapCost(0.5).Resolve(0)
	if err != nil {
		t.Fatal(err)
	}
	given, r, _, err := Evaluate(ir.Config{Schedule: "dualpipev", Ranks: 4, Micro: 8, Virtual: 2}, opt, share)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(given.Program.Ranks, res.Program.Ranks) || r.Makespan != span {
		t.Errorf("dualpipev V=2 -swap 4 lowers to another program (makespan %g, auto's %g)", r.Makespan, span)
	}
	if c.Swap != 4 {
		t.Errorf("the chosen candidate's Swap is %d, want 4", c.Swap)
	}
}

// TestAutoSwapLosesToRecompute: with swap transfers of 5 (10 times a
// V = 2 stage's F) recompute is cheaper: -swap auto chooses dualpipev
// V = 2 recomputing, 28, as without it; the one swap candidate it lowers
// (the others' compute orders with their swaps are already slower) is
// listed.
func TestAutoSwapLosesToRecompute(t *testing.T) {
	res, err := Lower(ir.Config{Schedule: Name, Ranks: 4, Micro: 8}, Options{MemLimit: 2, Cost: swapCost(5), SwapAuto: true})
	if err != nil {
		t.Fatal(err)
	}
	_, _, span := chosenOf(t, res)
	if res.Swap != 0 || res.Recompute == "" || res.Config.Schedule != "dualpipev" || math.Abs(span-28) > 1e-9 {
		t.Errorf("chose %s V=%d -swap %d -recompute %q (%g), want dualpipev V=2 recomputing (28)", res.Config.Schedule, res.Config.Virtual, res.Swap, res.Recompute, span)
	}
	if !slices.ContainsFunc(res.Candidates, func(c Candidate) bool { return c.Swap != 0 }) {
		t.Errorf("no swap candidate listed")
	}
}

// TestAutoSwapOnlyFits: P = 4, M = 8 within 1 with recompute not allowed
// (-recompute none) and swap transfers of 0.1: no family fits (v-min, the
// least, holds 2), and -swap auto finds interleaved V = 4 swapping at 6,
// 26.25, within 1 as the verifier counts it.
func TestAutoSwapOnlyFits(t *testing.T) {
	opt := Options{MemLimit: 1, Cost: swapCost(0.1)}
	opt.Passes.Set = map[string]string{recomputeOption: "none"}
	cfg := ir.Config{Schedule: Name, Ranks: 4, Micro: 8}
	if _, err := Lower(cfg, opt); err == nil || !strings.Contains(err.Error(), "no schedule fits the activation memory limit 1: the smallest family's is 2 (v-min, V=2)") {
		t.Errorf("without -swap auto: %v, want no schedule fits", err)
	}
	opt.SwapAuto = true
	res, err := Lower(cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	_, mem, span := chosenOf(t, res)
	if res.Config.Schedule != "interleaved" || res.Config.Virtual != 4 || res.Swap != 6 || res.Recompute != "" || math.Abs(span-26.25) > 1e-9 || mem > 1 {
		t.Errorf("chose %s V=%d -swap %d -recompute %q: %g within %g, want interleaved V=4 -swap 6: 26.25 within 1", res.Config.Schedule, res.Config.Virtual, res.Swap, res.Recompute, span, mem)
	}
	rep, err := verify.Check(res.Program, verify.Options{})
	if err != nil {
		t.Fatalf("the chosen program does not verify: %v", err)
	}
	if peak := slices.Max(rep.PeakLive) / float64(res.StagesPerShare()); peak > 1+1e-9 {
		t.Errorf("the verifier counts %g of a share live (%v chunks per rank), over the limit 1", peak, rep.PeakLive)
	}
}

// TestSwapAutoRefused: -swap auto with a given -swap is refused, naming
// both; without a memory limit, or with a -recompute policy given, no
// swap is tried.
func TestSwapAutoRefused(t *testing.T) {
	opt := Options{MemLimit: 1, SwapAuto: true}
	opt.Passes.Swap = 3
	if _, err := Lower(ir.Config{Schedule: Name, Ranks: 2, Micro: 4}, opt); err == nil || !strings.Contains(err.Error(), "-swap auto and -swap 3") {
		t.Errorf("got %v, want a refusal naming -swap auto and -swap 3", err)
	}
	res, err := Lower(ir.Config{Schedule: Name, Ranks: 2, Micro: 4}, Options{SwapAuto: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Swap != 0 || slices.ContainsFunc(res.Candidates, func(c Candidate) bool { return c.Swap != 0 }) {
		t.Errorf("without -mem auto tried swap (chose -swap %d)", res.Swap)
	}
	opt = Options{MemLimit: 1, SwapAuto: true}
	opt.Passes.Set = map[string]string{recomputeOption: "full"}
	res, err = Lower(ir.Config{Schedule: Name, Ranks: 2, Micro: 4}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if res.Swap != 0 || slices.ContainsFunc(res.Candidates, func(c Candidate) bool { return c.Swap != 0 }) {
		t.Errorf("with -recompute full auto tried swap (chose -swap %d)", res.Swap)
	}
}

// TestAutoSwapProgress: with -swap auto the search's last step is trying
// swap, after recompute, and it counts in the total.
func TestAutoSwapProgress(t *testing.T) {
	var seen []string
	last, lastTotal := -1, 0
	_, err := Lower(ir.Config{Schedule: Name, Ranks: 2, Micro: 4}, Options{MemLimit: 1, SwapAuto: true, Progress: func(step string, done, total int) {
		seen = append(seen, step)
		last, lastTotal = done, total
	}})
	if err != nil {
		t.Fatal(err)
	}
	n := len(seen)
	if n < 2 || seen[n-2] != "trying recompute under the limit" || seen[n-1] != "trying swap under the limit" || last != lastTotal-1 || n != lastTotal {
		t.Errorf("steps %q, the last at %d of %d", seen, last, lastTotal)
	}
}

// TestAutoSwapAgainstEveryDistance (long): on small configurations and
// limits at three swap costs, auto with -swap auto is as fast as the best
// of auto without it and every family's order lowered at every distance
// passes.SwapDistances gives (what bisecting for the largest distance that
// fits, and pruning by bounds, could miss), and it never chooses a
// program over the limit.
func TestAutoSwapAgainstEveryDistance(t *testing.T) {
	long.Skip(t, "-swap auto against every distance of every order")
	for _, P := range []int{2, 3, 4} {
		for _, limit := range []float64{1, 1.5, 2, 3} {
			for _, swap := range []float64{0, 0.5, 3} {
				cfg := ir.Config{Schedule: Name, Ranks: P, Micro: 2 * P}
				name := fmt.Sprintf("P=%d mem %g swap %g", P, limit, swap)
				share, err := swapCost(swap).Resolve(0)
				if err != nil {
					t.Fatal(err)
				}
				best := math.Inf(1)
				if res, err := Lower(cfg, Options{MemLimit: limit, Cost: swapCost(swap)}); err == nil {
					_, _, best = chosenOf(t, res)
				}
				for _, fam := range schedules.All() {
					if fam.ComputeOnly != "" {
						continue
					}
					for v := 1; v <= MaxVirtual; v++ {
						one := cfg
						one.Schedule, one.Virtual = fam.Name, v
						one, built, err := fam.BuildConfig(one)
						if err != nil {
							continue
						}
						for _, n := range passes.SwapDistances(built) {
							opt := Options{}
							opt.Passes.Swap = n
							_, r, mem, err := Evaluate(one, opt, share)
							if err == nil && mem <= limit*(1+1e-9) {
								best = min(best, r.Makespan)
							}
						}
					}
				}
				res, err := Lower(cfg, Options{MemLimit: limit, Cost: swapCost(swap), SwapAuto: true})
				if math.IsInf(best, 1) {
					if err == nil {
						t.Errorf("%s: auto chose %s V=%d -swap %d, but nothing fits", name, res.Config.Schedule, res.Config.Virtual, res.Swap)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v; want %g", name, err, best)
					continue
				}
				_, mem, span := chosenOf(t, res)
				if span > best*(1+1e-9) || mem > limit*(1+1e-9) {
					t.Errorf("%s: auto chose %s V=%d -swap %d -recompute %q: %g within %g; the best is %g", name, res.Config.Schedule, res.Config.Virtual, res.Swap, res.Recompute, span, mem, best)
				}
			}
		}
	}
}
