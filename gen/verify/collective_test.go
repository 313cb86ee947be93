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

// lowerClipped lowers the compute order p with -clip (passes.Clip places
// one ALL_REDUCE per rank before OPT_STEP) and checks that the result
// verifies and runs in the naive interpreter.
func lowerClipped(t *testing.T, p ir.Program, opt passes.Options) ir.Program {
	t.Helper()
	opt.ClipNorm = true
	q, _, err := passes.Lower(p, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verify.Check(q, verify.Options{}); err != nil {
		t.Fatalf("the lowered program with -clip: %v\n%s", err, ir.FormatText(q))
	}
	if why := runNaive(q); why != "" {
		t.Fatalf("the naive interpreter says the lowered program with -clip %s", why)
	}
	return q
}

var allReduce = ir.Step{Kind: abi.AllReduce, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}

func collAt(steps []ir.Step) int { return indexOf(steps, allReduce) }

// TestCollectiveRules: the mutations of issue 33's list, each with the
// error verify reports: an ALL_REDUCE missing on one rank, one moved to
// another rank, collectives posted in different orders (against a
// TIE_GRAD, against OPT_STEP), and one placed before a send its peer needs
// first (a deadlock of the strict model).
func TestCollectiveRules(t *testing.T) {
	base := func(t *testing.T) ir.Program {
		return lowerClipped(t, oneF1B(4, 4), passes.Options{Ties: []ir.Tie{{A: 0, B: 3}}})
	}
	cases := []struct {
		name     string
		mutate   func(q *ir.Program)
		code     verify.Code // 0: a *verify.DeadlockError
		words    string
		rankWord string // the rank the error names
	}{
		{"missing on one rank", func(q *ir.Program) {
			s := q.Ranks[2]
			q.Ranks[2] = slices.Delete(s, collAt(s), collAt(s)+1)
		}, verify.Missing, "this rank posts 0 ALL_REDUCE, rank 0 posts 1", "rank 2"},
		{"on a wrong rank", func(q *ir.Program) {
			s := q.Ranks[1]
			q.Ranks[1] = slices.Delete(s, collAt(s), collAt(s)+1)
			q.Ranks[2] = slices.Insert(q.Ranks[2], collAt(q.Ranks[2]), allReduce)
		}, verify.Missing, "this rank posts 0 ALL_REDUCE", "rank 1"},
		{"twice on one rank", func(q *ir.Program) {
			q.Ranks[3] = slices.Insert(q.Ranks[3], collAt(q.Ranks[3]), allReduce)
		}, verify.Duplicate, "this rank posts 2 ALL_REDUCE, rank 0 posts 1", "rank 3"},
		{"after OPT_STEP on one rank", func(q *ir.Program) {
			s := q.Ranks[1]
			q.Ranks[1] = moveStep(s, collAt(s), len(s)-1)
		}, verify.Order, "0 ALL_REDUCE step(s) come before OPT_STEP", "rank 1"},
		{"out of order against a TIE_GRAD", func(q *ir.Program) {
			// Rank 0 reduces before its exchange with rank 3, which
			// exchanges first: each waits for the other.
			s := q.Ranks[0]
			q.Ranks[0] = moveStep(s, collAt(s), indexOf(s, tieOf(0)))
		}, 0, "ALL_REDUCE", "rank 0"},
		{"before a send its peer needs first", func(q *ir.Program) {
			// Rank 3 reduces before its last SEND_B: rank 2 cannot reach
			// its ALL_REDUCE without that gradient.
			s := q.Ranks[3]
			q.Ranks[3] = moveStep(s, collAt(s), lastOf(s, ir.SendB, 3))
		}, 0, "an ALL_REDUCE passes only when every rank is at its own", "rank 3"},
		{"inside a batch", func(q *ir.Program) {
			s := q.Ranks[1]
			at := collAt(s)
			q.Ranks[1] = slices.Insert(slices.Delete(s, at, at+1), at, ir.Step{Kind: ir.BatchBegin, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}, allReduce, ir.Step{Kind: ir.BatchEnd, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None})
		}, verify.Structure, "ALL_REDUCE", "rank 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := base(t)
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
			case !strings.Contains(err.Error(), tc.words) || !strings.Contains(err.Error(), tc.rankWord):
				t.Fatalf("got %v; want it to say %q and name %s", err, tc.words, tc.rankWord)
			}
		})
	}
}

// TestCollectiveMutations: every position an ALL_REDUCE can be moved to on
// its rank, in lowered -clip programs of several families, gets the same
// verdict from verify and from the naive interpreter: accepted exactly when
// running it completes, and a deadlock only when running it hangs.
func TestCollectiveMutations(t *testing.T) {
	var accepted, hung, broke int
	for P := 2; P <= 4; P++ {
		for _, M := range []int{1, P, 2 * P} {
			for name, base := range map[string]ir.Program{
				"1f1b":        oneF1B(P, M),
				"zb":          zbLike(P, M),
				"interleaved": interleaved(P, 2, M),
				"v":           vshape(P, M, M%2 == 0),
			} {
				S := base.Stages()
				for _, opt := range []passes.Options{{}, {Batch: true}, {Ties: []ir.Tie{{A: 0, B: S - 1}}}} {
					low := lowerClipped(t, base, opt)
					for r, steps := range low.Ranks {
						i := collAt(steps)
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
								t.Fatalf("%s P=%d M=%d %+v, rank %d: ALL_REDUCE moved from %d to %d:\nverify: %v\nnaive:  %q\n%s", name, P, M, opt, r, i, j, err, why, ir.FormatText(p))
							case err == nil:
								accepted++
							case errors.As(err, &de) && !strings.HasPrefix(why, "hangs"):
								t.Fatalf("%s P=%d M=%d, rank %d: ALL_REDUCE moved to %d: verify %v, naive %q (a deadlock must hang)", name, P, M, r, j, err, why)
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
	}
	t.Logf("moved ALL_REDUCEs: %d accepted, %d deadlock, %d rejected otherwise", accepted, hung, broke)
	if accepted == 0 || hung == 0 || broke == 0 {
		t.Errorf("mutation mix too narrow: %d accepted, %d deadlock, %d other", accepted, hung, broke)
	}
}
