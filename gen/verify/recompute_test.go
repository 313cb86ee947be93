package verify_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

// lowerRecomputed lowers the compute order p with -recompute policy and
// checks that the result verifies.
func lowerRecomputed(t *testing.T, p ir.Program, policy string) ir.Program {
	t.Helper()
	q, _, err := passes.Lower(p, passes.Options{Set: map[string]string{"recompute": policy}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verify.Check(q, verify.Options{}); err != nil {
		t.Fatalf("the lowered program with -recompute %s: %v\n%s", policy, err, ir.FormatText(q))
	}
	return q
}

func recomputeAt(steps []ir.Step, stage, micro int) int {
	return indexOf(steps, ir.Step{Kind: abi.Recompute, Stage: stage, Micro: micro})
}

// TestRecomputeRules: issue 34's mutations of a -recompute program (R
// missing, R after its backward, R on the wrong rank, memory over the cap)
// and two more (R before its F, R twice), each with the error verify
// reports.
func TestRecomputeRules(t *testing.T) {
	base := func(t *testing.T) ir.Program { return lowerRecomputed(t, oneF1B(4, 8), "full") }
	cases := []struct {
		name   string
		mutate func(q *ir.Program)
		cap    int
		code   verify.Code
		words  string
	}{
		{"missing", func(q *ir.Program) {
			s := q.Ranks[1]
			i := recomputeAt(s, 1, 5)
			q.Ranks[1] = slices.Delete(s, i, i+1)
		}, 0, verify.Missing, "no RECOMPUTE of chunk (stage 1, micro 5)"},
		{"after its backward", func(q *ir.Program) {
			s := q.Ranks[2]
			q.Ranks[2] = moveStep(s, recomputeAt(s, 2, 3), indexOf(s, ir.Compute(ir.Backward, 2, 3)))
		}, 0, verify.Order, "after the chunk's first backward"},
		{"before its F", func(q *ir.Program) {
			s := q.Ranks[0]
			q.Ranks[0] = moveStep(s, recomputeAt(s, 0, 6), indexOf(s, ir.Compute(ir.Forward, 0, 6)))
		}, 0, verify.Order, "comes before 0F6"},
		{"twice", func(q *ir.Program) {
			s := q.Ranks[3]
			i := recomputeAt(s, 3, 2)
			q.Ranks[3] = slices.Insert(s, i, s[i])
		}, 0, verify.Duplicate, "a second"},
		{"on the wrong rank", func(q *ir.Program) {
			s := q.Ranks[1]
			i := recomputeAt(s, 1, 4)
			st := s[i]
			q.Ranks[1] = slices.Delete(s, i, i+1)
			q.Ranks[2] = slices.Insert(q.Ranks[2], recomputeAt(q.Ranks[2], 2, 4), st)
		}, 0, verify.Structure, "stage 1 lives on rank 1"},
		{"memory over the cap", func(q *ir.Program) {
			// Rank 0 rebuilds micro 5 before micro 4's backward: two
			// chunks live at once.
			s := q.Ranks[0]
			q.Ranks[0] = moveStep(s, recomputeAt(s, 0, 5), indexOf(s, ir.Compute(ir.Backward, 0, 4)))
		}, 1, verify.Memory, "over the limit of 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := base(t)
			opt := verify.Options{MaxActivations: tc.cap}
			if _, err := verify.Check(q, opt); err != nil {
				t.Fatalf("before the mutation: %v", err)
			}
			tc.mutate(&q)
			_, err := verify.Check(q, opt)
			var ve *verify.Error
			switch {
			case err == nil:
				t.Fatalf("verify accepts it:\n%s", ir.FormatText(q))
			case !errors.As(err, &ve) || ve.Code != tc.code:
				t.Fatalf("got %v; want a %s error", err, tc.code)
			case !strings.Contains(err.Error(), tc.words):
				t.Fatalf("got %v; want it to say %q", err, tc.words)
			}
		})
	}
}

// TestRecomputeMemory: with -recompute full each family's peak live
// chunks per rank is at most what it is without, and lower on some rank
// (the F drops its chunk, which is live again from its RECOMPUTE to its
// backward, or to its W after a split one), the slots are the
// same (a chunk keeps its input, in its slot, from its F to its backward),
// and -recompute none lowers as no option does.
func TestRecomputeMemory(t *testing.T) {
	for name, base := range map[string]ir.Program{
		"1f1b":        oneF1B(4, 8),
		"zb":          zbLike(4, 8),
		"interleaved": interleaved(4, 2, 8),
		"v":           vshape(4, 8, true),
	} {
		t.Run(name, func(t *testing.T) {
			plain, _, err := passes.Lower(base, passes.Options{})
			if err != nil {
				t.Fatal(err)
			}
			rp, err := verify.Check(plain, verify.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if none := lowerRecomputed(t, base, "none"); ir.FormatText(none) != ir.FormatText(plain) {
				t.Errorf("-recompute none changed the program")
			}
			lowerRecomputed(t, base, "full:0@idle") // verifies
			q := lowerRecomputed(t, base, "full")
			rq, _ := verify.Check(q, verify.Options{})
			lower := false
			for r := range rp.PeakActivations {
				if rq.PeakActivations[r] > rp.PeakActivations[r] {
					t.Errorf("rank %d: peak %d with recompute, %d without", r, rq.PeakActivations[r], rp.PeakActivations[r])
				}
				lower = lower || rq.PeakActivations[r] < rp.PeakActivations[r]
			}
			if !lower {
				t.Errorf("peaks %v with recompute, %v without; want a lower one", rq.PeakActivations, rp.PeakActivations)
			}
			if !slices.Equal(rq.Slots, rp.Slots) {
				t.Errorf("slots %v with recompute, %v without", rq.Slots, rp.Slots)
			}
		})
	}
}

// TestRecomputePeaksAgree: the verifier's peak live chunks per rank of a
// -recompute program (counted in program order) equal gen/sim's (swept in
// time at the default costs), for each family and policy.
func TestRecomputePeaksAgree(t *testing.T) {
	for name, base := range map[string]ir.Program{
		"1f1b": oneF1B(4, 8), "zb": zbLike(4, 8), "interleaved": interleaved(4, 2, 8), "v": vshape(4, 8, true),
	} {
		for _, pol := range []string{"full", "full:0", "full:0@idle", "selective:0.5", "selective:0=0.25,1=0.75@idle"} {
			q := lowerRecomputed(t, base, pol)
			rv, err := verify.Check(q, verify.Options{})
			if err != nil {
				t.Fatal(err)
			}
			rs, err := sim.Run(q, sim.DefaultCost())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rv.PeakActivations, rs.PeakActivations) || !slices.EqualFunc(rv.PeakLive, rs.PeakLive, near) {
				t.Errorf("%s -recompute %s: verify's peaks %v (%v), sim's %v (%v)", name, pol, rv.PeakActivations, rv.PeakLive, rs.PeakActivations, rs.PeakLive)
			}
		}
	}
}

// near reports whether two peaks of live chunks agree to 1e-9.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }

// TestRecomputeSelectiveMemory: a selective policy's peaks lie between
// full recompute's and none's, a share of 1 is full, and -max-activations
// counts the fraction: on 1f1b (P = 4, M = 8) with selective:0.5, rank 0
// holds 2.5 chunks at most (its 4 warm-up chunks keep half each, and the
// one it rebuilds is whole), which a limit of 2 refuses and 3 accepts.
func TestRecomputeSelectiveMemory(t *testing.T) {
	base := oneF1B(4, 8)
	peaks := func(pol string) []float64 {
		r, err := verify.Check(lowerRecomputed(t, base, pol), verify.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return r.PeakLive
	}
	none, full, half := peaks("none"), peaks("full"), peaks("selective:0.5")
	for r := range none {
		if half[r] < full[r] || half[r] > none[r] {
			t.Errorf("rank %d: selective:0.5 peak %v outside full's %v .. none's %v", r, half[r], full[r], none[r])
		}
	}
	if one := peaks("selective:1"); !slices.Equal(one, full) {
		t.Errorf("selective:1 peaks %v; full's %v", one, full)
	}
	if half[0] != 2.5 {
		t.Errorf("selective:0.5 rank 0 peak %v; want 2.5 (peaks %v)", half[0], half)
	}
	q := lowerRecomputed(t, base, "selective:0.5")
	if _, err := verify.Check(q, verify.Options{MaxActivations: 3}); err != nil {
		t.Errorf("limit 3: %v", err)
	}
	var e *verify.Error
	if _, err := verify.Check(q, verify.Options{MaxActivations: 2}); !errors.As(err, &e) || e.Code != verify.Memory || !strings.Contains(err.Error(), "2.5 chunks are live") {
		t.Errorf("limit 2: %v; want a Memory error at 2.5 chunks", err)
	}
}

// TestRecomputeFSDP: with -fsdp (and -batch) every policy, @idle included,
// lowers to a program that verifies: no RECOMPUTE inside a batch or while
// its stage is sharded; one placed while its stage is sharded (a RESHARD
// before it, an UNSHARD after it) is refused.
func TestRecomputeFSDP(t *testing.T) {
	for _, pol := range []string{"full", "full@idle", "full:0,1@idle"} {
		for _, opt := range []passes.Options{{FSDP: 1, Batch: true}, {FSDP: 2, FSDPPrefetch: 2}} {
			opt.Set = map[string]string{"recompute": pol}
			q, _, err := passes.Lower(interleaved(4, 2, 8), opt)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := verify.Check(q, verify.Options{}); err != nil {
				t.Errorf("-recompute %s, %+v: %v", pol, opt, err)
			}
		}
	}
	q, _, err := passes.Lower(interleaved(4, 2, 8), passes.Options{FSDP: 1, Set: map[string]string{"recompute": "full"}})
	if err != nil {
		t.Fatal(err)
	}
	s := q.Ranks[0]
	i := slices.IndexFunc(s, func(st ir.Step) bool { return st.Kind == abi.Recompute })
	st := s[i]
	fsdp := func(k ir.Kind) ir.Step {
		return ir.Step{Kind: k, Stage: st.Stage, Micro: ir.None, Peer: ir.None, Slot: ir.None}
	}
	q.Ranks[0] = slices.Insert(slices.Clone(s), i+1, fsdp(ir.Unshard))
	q.Ranks[0] = slices.Insert(q.Ranks[0], i, fsdp(ir.Reshard))
	_, err = verify.Check(q, verify.Options{})
	var ve *verify.Error
	if !errors.As(err, &ve) || ve.Code != verify.FSDP || !strings.Contains(err.Error(), "while its parameters are sharded") {
		t.Errorf("a RECOMPUTE between a RESHARD and an UNSHARD of its stage: got %v; want an FSDP error", err)
	}
}

// TestRecomputeBesideSwap: -swap and -recompute mix over different stages
// (1f1b P=4 M=8: -swap 4 swaps the chunks of stages 0 and 1, whose F and
// backward lie 6 and 4 compute steps apart; full:2,3 recomputes the
// others): the program verifies, each rank's peak is the simulator's, and
// the recomputing ranks hold one chunk at a time; a chunk given both (a
// RECOMPUTE added before a swapped chunk's backward) is refused, naming
// it, and so is a policy that recomputes a swapped stage.
func TestRecomputeBesideSwap(t *testing.T) {
	opt := passes.Options{Swap: 4, Set: map[string]string{"recompute": "full:2,3"}}
	q, _, err := passes.Lower(oneF1B(4, 8), opt)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Check(q, verify.Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, ir.FormatText(q))
	}
	res, err := sim.Run(q, sim.Cost{F: []float64{1}, B: []float64{2}, Swap: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.PeakActivations, res.PeakActivations) || rep.PeakActivations[2] != 1 || rep.PeakActivations[3] != 1 {
		t.Errorf("peaks: verifier %v, simulator %v; want them equal, 1 on ranks 2 and 3", rep.PeakActivations, res.PeakActivations)
	}
	swaps := 0
	for _, st := range q.Ranks[0] {
		if st.Kind.IsSwap() {
			swaps++
		}
	}
	if swaps == 0 || recomputeAt(q.Ranks[2], 2, 0) < 0 {
		t.Fatalf("want swap steps on rank 0 and RECOMPUTEs on rank 2:\n%s", ir.FormatText(q))
	}
	// Both on one chunk: a RECOMPUTE of every chunk of stage 0 (so that
	// the stage recomputes all or none), the swapped ones included,
	// before its backward, in the backward's slot.
	s := slices.Clone(q.Ranks[0])
	for m := range 8 {
		b := indexOf(s, ir.Compute(ir.Backward, 0, m))
		s = slices.Insert(s, b, ir.Step{Kind: abi.Recompute, Stage: 0, Micro: m, Peer: ir.None, Slot: s[b].Slot})
	}
	q.Ranks[0] = s
	_, err = verify.Check(q, verify.Options{})
	var ve *verify.Error
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "has a RECOMPUTE and swap steps") {
		t.Errorf("a chunk both swapped and recomputed: %v; want it refused, naming the chunk", err)
	}
	if _, _, err := passes.Lower(oneF1B(4, 8), passes.Options{Swap: 4, Set: map[string]string{"recompute": "full:1,2,3"}}); err == nil || !strings.Contains(err.Error(), "leave stage 1 out of -recompute") {
		t.Errorf("-swap 4 -recompute full:1,2,3: %v; want the swapped stage 1 refused", err)
	}
}
