package auto

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

// swapCost is the default cost with each swap transfer taking swap.
func swapCost(swap float64) sim.Cost {
	c := sim.DefaultCost()
	c.Swap = swap
	return c
}

// TestAutoSwap: P = 4, M = 8 within 1 (one micro-batch of a rank's share;
// no family fits, v-min holds 2) with swap transfers of 0.1. Without
// -swap auto the best is interleaved-zb V = 4 recomputing 12 of its 16
// stages, 31.25 (TestAutoRecompute), the best of the candidates it lists
// without swap; with it, interleaved V = 4 swapping
// every chunk 6 or more compute steps from its backward, 26.25, faster
// than every candidate without swap. The chosen program verifies with
// the verifier's memory (its peak live chunks over V) within the limit,
// is the program -swap 6 gives for that family, and its swap distance is
// one passes.SwapDistances lists for the order.
func TestAutoSwap(t *testing.T) {
	res, err := Lower(ir.Config{Schedule: Name, Ranks: 4, Micro: 8}, Options{MemLimit: 1, Cost: swapCost(0.1), SwapAuto: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.Schedule != "interleaved" || res.Config.Virtual != 4 || res.Swap != 6 || res.Recompute != "" {
		t.Fatalf("chose %s V=%d -swap %d -recompute %q, want interleaved V=4 -swap 6", res.Config.Schedule, res.Config.Virtual, res.Swap, res.Recompute)
	}
	c, mem, span := chosenOf(t, res)
	if math.Abs(span-26.25) > 1e-9 || mem > 1 {
		t.Errorf("makespan %g, memory %g; want 26.25 within 1", span, mem)
	}
	// Every candidate without swap that fits (the recompute ones) is
	// slower: the best of them is TestAutoRecompute's 31.25.
	noSwap := math.Inf(1)
	for _, c := range res.Candidates {
		if c.Skipped == "" && c.Swap == 0 {
			noSwap = min(noSwap, c.Makespan)
		}
	}
	if math.Abs(noSwap-31.25) > 1e-9 {
		t.Errorf("the best candidate without swap takes %g, want 31.25", noSwap)
	}
	rep, err := verify.Check(res.Program, verify.Options{})
	if err != nil {
		t.Fatalf("the chosen program does not verify: %v", err)
	}
	if peak := slices.Max(rep.PeakLive) / float64(res.StagesPerShare()); peak > 1+1e-9 {
		t.Errorf("the verifier counts %g of a share live (%v chunks per rank), over the limit 1", peak, rep.PeakLive)
	}
	if !slices.ContainsFunc(res.Program.Ranks[0], func(s ir.Step) bool { return s.Kind == ir.SwapLaunchOffload }) {
		t.Errorf("rank 0 swaps nothing")
	}
	if !slices.Contains(passes.SwapDistances(res.Compute), res.Swap) {
		t.Errorf("-swap %d is not among the order's distances %v", res.Swap, passes.SwapDistances(res.Compute))
	}
	// The same program as the family lowered with -swap 6 given, and
	// the candidate reports its distance.
	opt := Options{}
	opt.Passes.Swap = 6
	share, err := swapCost(0.1).Resolve(0)
	if err != nil {
		t.Fatal(err)
	}
	given, r, _, err := Evaluate(ir.Config{Schedule: "interleaved", Ranks: 4, Micro: 8, Virtual: 4}, opt, share)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(given.Program.Ranks, res.Program.Ranks) || r.Makespan != span {
		t.Errorf("interleaved V=4 -swap 6 lowers to another program (makespan %g, auto's %g)", r.Makespan, span)
	}
	if c.Swap != 6 {
		t.Errorf("the chosen candidate's Swap is %d, want 6", c.Swap)
	}
}

// TestAutoSwapLosesToRecompute: with swap transfers of 5 (20 times a
// V = 4 stage's F) recompute is cheaper: -swap auto chooses
// interleaved-zb V = 4 recomputing, 31.25, as without it, and lists the
// swap candidates it tried.
func TestAutoSwapLosesToRecompute(t *testing.T) {
	res, err := Lower(ir.Config{Schedule: Name, Ranks: 4, Micro: 8}, Options{MemLimit: 1, Cost: swapCost(5), SwapAuto: true})
	if err != nil {
		t.Fatal(err)
	}
	_, _, span := chosenOf(t, res)
	if res.Swap != 0 || res.Recompute == "" || res.Config.Schedule != "interleaved-zb" || math.Abs(span-31.25) > 1e-9 {
		t.Errorf("chose %s V=%d -swap %d -recompute %q (%g), want interleaved-zb V=4 recomputing (31.25)", res.Config.Schedule, res.Config.Virtual, res.Swap, res.Recompute, span)
	}
	if !slices.ContainsFunc(res.Candidates, func(c Candidate) bool { return c.Swap != 0 }) {
		t.Errorf("no swap candidate listed")
	}
}

// TestSwapAutoRefused: -swap auto with a given -swap is refused, naming
// both; without a memory limit no swap is tried.
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
}
