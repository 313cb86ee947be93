package passes

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestClipPlacement: -clip puts one ALL_REDUCE on every rank, right before
// its OPT_STEP (after its TIE_GRADs), or last without OPT_STEP; a
// forward-only program gets none, and a program that has its collectives
// keeps them.
func TestClipPlacement(t *testing.T) {
	count := func(steps []ir.Step) int {
		n := 0
		for _, st := range steps {
			if st.Kind.IsCollective() {
				n++
			}
		}
		return n
	}
	cases := []struct {
		name   string
		p      ir.Program
		opt    Options
		before ir.Kind // the step after the ALL_REDUCE; Invalid: it is last
		want   int     // ALL_REDUCE steps per rank
	}{
		{"1f1b", oneF1B(4, 4), Options{}, ir.OptStep, 1},
		{"interleaved, ties", interleaved(2, 2, 4), Options{Ties: []ir.Tie{{A: 0, B: 3}}}, ir.OptStep, 1},
		{"V, split, batch", vshape(2, 4, false), Options{Split: true, Batch: true}, ir.OptStep, 1},
		{"no OPT_STEP", oneF1B(3, 3), Options{NoOptStep: true}, ir.Invalid, 1},
		{"forward-only", oneF1B(3, 3), Options{ForwardOnly: true}, ir.Invalid, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.ClipNorm = true
			q, info, err := Lower(tc.p, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want > 0 && info.Passes[len(info.Passes)-2] != "clip" {
				t.Errorf("passes %v; want clip right before slots", info.Passes)
			}
			for r, steps := range q.Ranks {
				if n := count(steps); n != tc.want {
					t.Fatalf("rank %d holds %d ALL_REDUCE; want %d:\n%s", r, n, tc.want, ir.FormatText(q))
				}
				if tc.want == 0 {
					continue
				}
				i := len(steps) - 1
				if tc.before != ir.Invalid {
					i = len(steps) - 2
					if steps[i+1].Kind != tc.before {
						t.Errorf("rank %d: ALL_REDUCE is followed by %s; want %s", r, steps[i+1], tc.before)
					}
				}
				if !steps[i].Kind.IsCollective() {
					t.Errorf("rank %d: step %d is %s; want ALL_REDUCE", r, i, steps[i])
				}
				for _, st := range steps[i+1:] {
					if st.Kind == ir.TieGrad || st.Kind.IsComm() || st.Kind.IsCompute() {
						t.Errorf("rank %d: %s after the ALL_REDUCE", r, st)
					}
				}
			}
			again := Clip(q)
			for r := range q.Ranks {
				if count(again.Ranks[r]) != tc.want {
					t.Errorf("rank %d: Clip of a clipped program holds %d ALL_REDUCE; want it kept as it is", r, count(again.Ranks[r]))
				}
			}
		})
	}
}

// TestAfterTrailingSend: when the compute order holds OPT_STEP, the timed
// comm order can leave a rank's last send after it; Clip and Tie then move
// OPT_STEP behind the send, after their steps, so no rendezvous waits for a
// transfer another rank needs first (beforeOptStep).
func TestAfterTrailingSend(t *testing.T) {
	p, err := ir.ParseText("rank 0: 0F0 0F1 0B0 0B1 OPT_STEP\nrank 1: 1F0 1B0 1F1 1B1 OPT_STEP\n")
	if err != nil {
		t.Fatal(err)
	}
	q, _, err := Lower(p, Options{Comm: CommOptions{Order: Timed}})
	if err != nil {
		t.Fatal(err)
	}
	if k := q.Ranks[1][len(q.Ranks[1])-1].Kind; !k.IsSend() {
		t.Fatalf("rank 1 ends with %s; the test wants the timed order to leave a send after OPT_STEP:\n%s", k, ir.FormatText(q))
	}
	q, _, err = Lower(p, Options{ClipNorm: true, Ties: []ir.Tie{{A: 0, B: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for r, steps := range q.Ranks {
		n := len(steps)
		if steps[n-3].Kind != ir.TieGrad || !steps[n-2].Kind.IsCollective() || steps[n-1].Kind != ir.OptStep {
			t.Errorf("rank %d ends with %v; want TIE_GRAD ALL_REDUCE OPT_STEP:\n%s", r, steps[n-3:], ir.FormatText(q))
		}
	}
}

// TestDropCollectives: with -clip a compute order's ALL_REDUCE steps are
// dropped (the pass places them); without it they are refused, naming the
// step and the fix.
func TestDropCollectives(t *testing.T) {
	p, err := ir.ParseText("rank 0: 0F0 0B0 ALL_REDUCE OPT_STEP\nrank 1: 1F0 1B0 ALL_REDUCE OPT_STEP\n")
	if err != nil {
		t.Fatal(err)
	}
	q, err := DropCollectives(p, true)
	if err != nil {
		t.Fatal(err)
	}
	for r, steps := range q.Ranks {
		if len(steps) != 3 || len(p.Ranks[r]) != 4 {
			t.Errorf("rank %d: %v after dropping, %v before; want the ALL_REDUCE gone and the input kept", r, steps, p.Ranks[r])
		}
	}
	if _, err := DropCollectives(p, false); err == nil || !strings.Contains(err.Error(), "rank 0 step 2 (ALL_REDUCE)") || !strings.Contains(err.Error(), "give -clip") {
		t.Errorf("without -clip: %v; want the step named and -clip suggested", err)
	}
	if q, err := DropCollectives(oneF1B(2, 2), false); err != nil || len(q.Ranks[0]) != len(oneF1B(2, 2).Ranks[0]) {
		t.Errorf("a program without collectives: %v, %v", q, err)
	}
}
