package verify_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/verify"
)

var gatherLoss = ir.Step{Kind: abi.GatherLoss, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}

// lowerGathered lowers p with -gather-loss (and -clip when clip) and
// checks that it verifies and runs in the naive interpreter.
func lowerGathered(t *testing.T, p ir.Program, clip bool) ir.Program {
	t.Helper()
	q, _, err := passes.Lower(p, passes.Options{ClipNorm: clip, Set: map[string]string{"gather-loss": "on"}})
	if err != nil {
		t.Fatal(err)
	}
	for r, steps := range q.Ranks {
		if steps[len(steps)-1].Kind != abi.GatherLoss {
			t.Fatalf("rank %d ends with %s; want GATHER_LOSS", r, steps[len(steps)-1])
		}
	}
	if _, err := verify.Check(q, verify.Options{}); err != nil {
		t.Fatalf("the lowered program with -gather-loss: %v\n%s", err, ir.FormatText(q))
	}
	if why := runNaive(q); why != "" {
		t.Fatalf("the naive interpreter says the lowered program with -gather-loss %s", why)
	}
	return q
}

// TestGatherLossRules: GATHER_LOSS is checked as a collective of its own:
// missing or doubled on one rank, posted before a send its peer needs
// first or in another order than ALL_REDUCE on one rank (deadlocks), or
// before a loss its rank computes.
func TestGatherLossRules(t *testing.T) {
	at := func(steps []ir.Step) int { return indexOf(steps, gatherLoss) }
	cases := []struct {
		name   string
		clip   bool
		mutate func(q *ir.Program)
		code   verify.Code // 0: a *verify.DeadlockError
		words  string
	}{
		{"missing on one rank", false, func(q *ir.Program) {
			s := q.Ranks[2]
			q.Ranks[2] = slices.Delete(s, at(s), at(s)+1)
		}, verify.Missing, "this rank posts 0 GATHER_LOSS, rank 0 posts 1"},
		{"twice on one rank", false, func(q *ir.Program) {
			q.Ranks[1] = append(q.Ranks[1], gatherLoss)
		}, verify.Duplicate, "this rank posts 2 GATHER_LOSS, rank 0 posts 1"},
		{"before a send its peer needs first", false, func(q *ir.Program) {
			s := q.Ranks[3]
			q.Ranks[3] = moveStep(s, at(s), lastOf(s, ir.SendB, 3))
		}, 0, "a GATHER_LOSS passes only when every rank is at its own"},
		{"before ALL_REDUCE on one rank", true, func(q *ir.Program) {
			s := q.Ranks[1]
			q.Ranks[1] = moveStep(s, at(s), collAt(s))
		}, 0, "rank 1"},
		{"before a loss on the last stage's rank", false, func(q *ir.Program) {
			s := q.Ranks[3]
			q.Ranks[3] = moveStep(s, at(s), 0)
		}, verify.Order, "which computes a loss"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := lowerGathered(t, oneF1B(4, 4), tc.clip)
			tc.mutate(&q)
			_, err := verify.Check(q, verify.Options{})
			if why := runNaive(q); why == "" {
				t.Errorf("the naive interpreter runs the mutated program")
			}
			var ve *verify.Error
			var de *verify.DeadlockError
			switch {
			case err == nil:
				t.Fatalf("verify accepts it:\n%s", ir.FormatText(q))
			case tc.code == 0 && !errors.As(err, &de):
				t.Fatalf("got %v; want a deadlock", err)
			case tc.code != 0 && (!errors.As(err, &ve) || ve.Code != tc.code):
				t.Fatalf("got %v; want a %s error", err, tc.code)
			case !strings.Contains(err.Error(), tc.words):
				t.Fatalf("got %v; want it to say %q", err, tc.words)
			}
		})
	}
}

// TestGatherLossMutations: every position a GATHER_LOSS can be moved to on
// its rank, in lowered -gather-loss programs (with -clip too), gets the
// same verdict from verify and from the naive interpreter.
func TestGatherLossMutations(t *testing.T) {
	var accepted, hung, broke int
	for P := 2; P <= 3; P++ {
		for _, base := range []ir.Program{oneF1B(P, 2*P), vshape(P, P, true)} {
			for _, clip := range []bool{false, true} {
				low := lowerGathered(t, base, clip)
				for r, steps := range low.Ranks {
					i := indexOf(steps, gatherLoss)
					for j := range len(steps) {
						if j == i {
							continue
						}
						p := low.Clone()
						p.Ranks[r] = moveStep(steps, i, j)
						why := runNaive(p)
						_, err := verify.Check(p, verify.Options{})
						var de *verify.DeadlockError
						switch {
						case (err == nil) != (why == ""):
							t.Fatalf("P=%d clip=%v, rank %d: GATHER_LOSS moved from %d to %d:\nverify: %v\nnaive:  %q\n%s", P, clip, r, i, j, err, why, ir.FormatText(p))
						case err == nil:
							accepted++
						case errors.As(err, &de) && !strings.HasPrefix(why, "hangs"):
							t.Fatalf("P=%d clip=%v, rank %d: GATHER_LOSS moved to %d: verify %v, naive %q (a deadlock must hang)", P, clip, r, j, err, why)
						case de != nil:
							hung++
						default:
							broke++
						}
					}
				}
			}
		}
	}
	t.Logf("moved GATHER_LOSSes: %d accepted, %d deadlock, %d rejected otherwise", accepted, hung, broke)
	if accepted == 0 || hung == 0 || broke == 0 {
		t.Errorf("mutation mix too narrow: %d accepted, %d deadlock, %d other", accepted, hung, broke)
	}
}
