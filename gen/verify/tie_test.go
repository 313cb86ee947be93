package verify_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/verify"
)

// lowerTied lowers the compute order p with ties (passes.Tie places the
// TIE_GRAD steps) and checks that the result verifies.
func lowerTied(t *testing.T, p ir.Program, ties []ir.Tie, opt passes.Options) ir.Program {
	t.Helper()
	opt.Ties = ties
	q, _, err := passes.Lower(p, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verify.Check(q, verify.Options{}); err != nil {
		t.Fatalf("the lowered program with ties %v: %v", ties, err)
	}
	return q
}

// indexOf returns the index of the first step of rank r that is want (by
// kind, stage and micro), or -1; lastOf the last.
func indexOf(steps []ir.Step, want ir.Step) int {
	return slices.IndexFunc(steps, func(s ir.Step) bool { return s.SameAction(want) })
}

func lastOf(steps []ir.Step, k ir.Kind, stage int) int {
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Kind == k && steps[i].Stage == stage {
			return i
		}
	}
	return -1
}

// moveStep moves step i of steps to index j (of the list without it).
func moveStep(steps []ir.Step, i, j int) []ir.Step {
	st := steps[i]
	rest := slices.Delete(slices.Clone(steps), i, i+1)
	return slices.Insert(rest, j, st)
}

func tieOf(stage int) ir.Step {
	return ir.Step{Kind: ir.TieGrad, Stage: stage, Micro: ir.None, Peer: ir.None, Slot: ir.None}
}

// TestTieMisplacedDeadlocks: an exchange placed where a rank would wait for
// its peer while the peer waits for a transfer the rank posts after it is a
// deadlock the strict model finds (the mutation verify must reject), and
// exchanges of two ties met in different orders on two ranks too.
func TestTieMisplacedDeadlocks(t *testing.T) {
	t.Run("1f1b: rank 3 exchanges before its last SEND_B", func(t *testing.T) {
		// Rank 0's last backward needs, through ranks 1 and 2, the gradient
		// of micro 3 that rank 3 sends after its own last backward; rank
		// 3's TIE_GRAD waits for rank 0 to reach its own, after that
		// backward.
		q := lowerTied(t, oneF1B(4, 4), []ir.Tie{{A: 0, B: 3}}, passes.Options{})
		steps := q.Ranks[3]
		tie := indexOf(steps, tieOf(3))
		lastB := lastOf(steps, ir.Backward, 3)
		if tie < 0 || lastB < 0 || steps[lastB+1].Kind != ir.SendB {
			t.Fatalf("rank 3 has no TIE_GRAD, or its last B is not followed by SEND_B:\n%s", ir.FormatText(q))
		}
		q.Ranks[3] = moveStep(steps, tie, lastB+1)
		_, err := verify.Check(q, verify.Options{})
		var de *verify.DeadlockError
		if !errors.As(err, &de) {
			t.Fatalf("got %v; want a deadlock", err)
		}
		if !strings.Contains(err.Error(), "3TIE_GRAD") {
			t.Errorf("the deadlock %q does not name rank 3's TIE_GRAD", err)
		}
	})
	t.Run("interleaved: the last stage's rank exchanges before its other stage's backwards", func(t *testing.T) {
		q := lowerTied(t, interleaved(2, 2, 4), []ir.Tie{{A: 0, B: 3}}, passes.Options{})
		steps := q.Ranks[1]
		tie := indexOf(steps, tieOf(3))
		lastB := lastOf(steps, ir.Backward, 3)
		q.Ranks[1] = moveStep(steps, tie, lastB+1)
		if _, err := verify.Check(q, verify.Options{}); !errors.As(err, new(*verify.DeadlockError)) {
			t.Fatalf("got %v; want a deadlock", err)
		}
	})
	t.Run("two ties in opposite orders", func(t *testing.T) {
		// Stages 0, 2 on rank 0 and 1, 3 on rank 1: rank 0 meets tie 0:1
		// first, rank 1 (swapped) tie 2:3.
		q := lowerTied(t, interleaved(2, 2, 4), []ir.Tie{{A: 0, B: 1}, {A: 2, B: 3}}, passes.Options{})
		steps := q.Ranks[1]
		a, b := indexOf(steps, tieOf(1)), indexOf(steps, tieOf(3))
		if a < 0 || b != a+1 {
			t.Fatalf("rank 1's TIE_GRADs are not adjacent:\n%s", ir.FormatText(q))
		}
		steps[a], steps[b] = steps[b], steps[a]
		if _, err := verify.Check(q, verify.Options{}); !errors.As(err, new(*verify.DeadlockError)) {
			t.Fatalf("got %v; want a deadlock", err)
		}
	})
	t.Run("a tie on one rank is one TIE_GRAD", func(t *testing.T) {
		q := lowerTied(t, vshape(2, 4, true), []ir.Tie{{A: 0, B: 3}}, passes.Options{})
		if indexOf(q.Ranks[1], tieOf(1)) >= 0 || indexOf(q.Ranks[0], tieOf(0)) < 0 {
			t.Fatalf("stages 0 and 3 live on rank 0: want one TIE_GRAD there:\n%s", ir.FormatText(q))
		}
	})
}

// TestTieRules: what verify requires of TIE_GRAD steps beyond deadlock
// freedom, each with the error code and words it reports.
func TestTieRules(t *testing.T) {
	base := func(t *testing.T) ir.Program {
		return lowerTied(t, oneF1B(4, 4), []ir.Tie{{A: 0, B: 3}}, passes.Options{})
	}
	cases := []struct {
		name   string
		mutate func(q *ir.Program)
		code   verify.Code
		words  string
	}{
		{"before the stage's last backward", func(q *ir.Program) {
			s := q.Ranks[3]
			q.Ranks[3] = moveStep(s, indexOf(s, tieOf(3)), lastOf(s, ir.Backward, 3))
		}, verify.Order, "not final"},
		{"after OPT_STEP", func(q *ir.Program) {
			s := q.Ranks[0]
			q.Ranks[0] = moveStep(s, indexOf(s, tieOf(0)), len(s)-1)
		}, verify.Order, "after OPT_STEP"},
		{"missing on one rank", func(q *ir.Program) {
			s := q.Ranks[3]
			q.Ranks[3] = slices.Delete(s, indexOf(s, tieOf(3)), indexOf(s, tieOf(3))+1)
		}, verify.Missing, "3TIE_GRAD"},
		{"twice", func(q *ir.Program) {
			s := q.Ranks[0]
			q.Ranks[0] = slices.Insert(s, indexOf(s, tieOf(0)), tieOf(0))
		}, verify.Duplicate, "second TIE_GRAD"},
		{"no tie declared", func(q *ir.Program) { q.Ties = nil }, verify.Structure, "-tie A:B"},
		{"a stage in no tie", func(q *ir.Program) {
			s := q.Ranks[1]
			q.Ranks[1] = slices.Insert(s, len(s)-1, tieOf(1))
		}, verify.Structure, "in no tie"},
		{"a tie out of range", func(q *ir.Program) { q.Ties = []ir.Tie{{A: 0, B: 9}} }, verify.Structure, "4 stages"},
		{"on another rank's stage", func(q *ir.Program) {
			s := q.Ranks[1]
			q.Ranks[1] = slices.Insert(s, len(s)-1, tieOf(3))
		}, verify.Structure, "lives on rank 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := base(t)
			tc.mutate(&q)
			_, err := verify.Check(q, verify.Options{})
			var ve *verify.Error
			if !errors.As(err, &ve) || ve.Code != tc.code || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("got %v; want a %s error saying %q", err, tc.code, tc.words)
			}
		})
	}
	t.Run("a tie on one rank names its first stage", func(t *testing.T) {
		q := lowerTied(t, vshape(2, 4, false), []ir.Tie{{A: 0, B: 3}}, passes.Options{})
		s := q.Ranks[0]
		s[indexOf(s, tieOf(0))].Stage = 3
		_, err := verify.Check(q, verify.Options{})
		if err == nil || !strings.Contains(err.Error(), "one TIE_GRAD naming stage 0") {
			t.Fatalf("got %v; want the tie's first stage named", err)
		}
	})
}

// TestTieMutations: every position a TIE_GRAD can be moved to on its rank,
// in lowered tied programs of several families, ties and comm options, gets
// the same verdict from verify and from the independent naive interpreter
// (runNaive): accepted exactly when running it completes, and a deadlock
// only when running it hangs.
func TestTieMutations(t *testing.T) {
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
				tieSets := [][]ir.Tie{{{A: 0, B: S - 1}}}
				if S >= 4 {
					tieSets = append(tieSets, []ir.Tie{{A: 0, B: S - 1}, {A: 1, B: S - 2}}, []ir.Tie{{A: 1, B: 2}})
				}
				for _, ties := range tieSets {
					for _, batch := range []bool{false, true} {
						low := lowerTied(t, base, ties, passes.Options{Batch: batch})
						if why := runNaive(low); why != "" {
							t.Fatalf("%s P=%d M=%d ties %v: the naive interpreter says the lowered program %s", name, P, M, ties, why)
						}
						for r, steps := range low.Ranks {
							for i, st := range steps {
								if st.Kind != ir.TieGrad {
									continue
								}
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
										t.Fatalf("%s P=%d M=%d ties %v batch=%v, rank %d: %s moved from %d to %d:\nverify: %v\nnaive:  %q\n%s", name, P, M, ties, batch, r, st, i, j, err, why, ir.FormatText(p))
									case err == nil:
										accepted++
									case errors.As(err, &de) && !strings.HasPrefix(why, "hangs"):
										// (A program that hangs may also break a rule
										// verify reports first: a TIE_GRAD after OPT_STEP.)
										t.Fatalf("%s P=%d M=%d ties %v, rank %d: %s moved to %d: verify %v, naive %q (a deadlock must hang)", name, P, M, ties, r, st, j, err, why)
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
		}
	}
	t.Logf("moved TIE_GRADs: %d accepted, %d deadlock, %d rejected otherwise", accepted, hung, broke)
	if accepted == 0 || hung == 0 || broke == 0 {
		t.Errorf("mutation mix too narrow: %d accepted, %d deadlock, %d other", accepted, hung, broke)
	}
}
