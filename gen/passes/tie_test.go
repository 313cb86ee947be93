package passes

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestTiePlacement: each rank holding a stage of a tie gets one TIE_GRAD
// per tie, in increasing order of the tie's first stage, right before its
// OPT_STEP; a tie within one rank one step naming its first stage.
func TestTiePlacement(t *testing.T) {
	cases := []struct {
		name string
		p    ir.Program
		ties []ir.Tie
		want map[int][]int // rank -> the stages its TIE_GRADs name, in order
	}{
		{"1f1b across ranks", oneF1B(4, 4), []ir.Tie{{A: 0, B: 3}}, map[int][]int{0: {0}, 3: {3}}},
		{"two ties, given in reverse", interleaved(2, 2, 4), []ir.Tie{{A: 2, B: 3}, {A: 0, B: 1}}, map[int][]int{0: {0, 2}, 1: {1, 3}}},
		{"V: both ends on rank 0", vshape(2, 4, false), []ir.Tie{{A: 0, B: 3}}, map[int][]int{0: {0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, _, err := Lower(tc.p, Options{Ties: tc.ties})
			if err != nil {
				t.Fatal(err)
			}
			if len(q.Ties) != len(tc.ties) || q.Ties[0].A > q.Ties[len(q.Ties)-1].A {
				t.Errorf("Program.Ties = %v; want %v sorted by first stage", q.Ties, tc.ties)
			}
			for r, steps := range q.Ranks {
				var got []int
				for i, st := range steps {
					if st.Kind != ir.TieGrad {
						continue
					}
					got = append(got, st.Stage)
					if i+len(tc.want[r])-len(got) != len(steps)-2 {
						t.Errorf("rank %d: TIE_GRAD %d at step %d of %d; want the TIE_GRADs right before OPT_STEP, the last step", r, st.Stage, i, len(steps))
					}
				}
				if len(got) != len(tc.want[r]) || (len(got) > 0 && !equalInts(got, tc.want[r])) {
					t.Errorf("rank %d: TIE_GRADs of stages %v; want %v", r, got, tc.want[r])
				}
				if steps[len(steps)-1].Kind != ir.OptStep {
					t.Errorf("rank %d ends with %s, not OPT_STEP", r, steps[len(steps)-1])
				}
			}
		})
	}
}

// TestTieRefuses: bad ties and programs a tie does not fit, each refused
// naming the value and the fix; a forward-only program is left untied.
func TestTieRefuses(t *testing.T) {
	copies := oneF1B(4, 4)
	copies.Copies = 2
	for _, tc := range []struct {
		name  string
		p     ir.Program
		opt   Options
		ties  []ir.Tie
		words string
	}{
		{"out of range", oneF1B(4, 4), Options{}, []ir.Tie{{A: 0, B: 4}}, "4 stages (0..3)"},
		{"a stage in two ties", oneF1B(4, 4), Options{}, []ir.Tie{{A: 0, B: 3}, {A: 0, B: 2}}, "both name stage 0"},
		{"model copies", copies, Options{}, []ir.Tie{{A: 0, B: 1}}, "model copies"},
		{"FSDP", oneF1B(4, 4), Options{FSDP: 1}, []ir.Tie{{A: 0, B: 3}}, "-fsdp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := tc.opt
			opt.Ties = tc.ties
			_, _, err := Lower(tc.p, opt)
			if tc.p.Copies > 1 {
				_, err = Tie(tc.p, tc.ties) // the pass itself: the copies program is no 1f1b
			}
			if err == nil || !strings.Contains(err.Error(), tc.words) || !strings.Contains(err.Error(), "tie") {
				t.Fatalf("got %v; want an error of pass tie saying %q", err, tc.words)
			}
		})
	}
	t.Run("forward-only", func(t *testing.T) {
		q, _, err := Lower(oneF1B(4, 4), Options{ForwardOnly: true, Ties: []ir.Tie{{A: 0, B: 3}}})
		if err != nil {
			t.Fatal(err)
		}
		if q.Ties != nil || strings.Contains(ir.FormatText(q), "TIE_GRAD") {
			t.Fatalf("a forward-only program has no gradients to sum; got ties %v:\n%s", q.Ties, ir.FormatText(q))
		}
	})
}
