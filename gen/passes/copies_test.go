package passes

import (
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/schedules"
)

// TestLowerCopies: dualpipe's two model copies (Copies = 2) lower under
// every comm order: loads at each micro's route ends, no transfer across
// the copies' boundary (stages P-1 and P), Copies kept; a step off its
// micro's route is refused.
func TestLowerCopies(t *testing.T) {
	const P, M = 4, 8
	p, err := schedules.Build(ir.Config{Schedule: "dualpipe", Ranks: P, Micro: M})
	if err != nil {
		t.Fatal(err)
	}
	for _, order := range []CommOrder{Timed, Late, Eager} {
		q, _, err := Lower(p, Options{Comm: CommOptions{Order: order}})
		if err != nil {
			t.Fatalf("order %v: %v", order, err)
		}
		if q.Copies != 2 {
			t.Errorf("order %v: Copies = %d, want 2", order, q.Copies)
		}
		loads := map[[2]int]bool{}
		for _, steps := range q.Ranks {
			for _, st := range steps {
				switch {
				case st.Kind == ir.DataLoad:
					loads[[2]int{st.Stage, st.Micro}] = true
				case st.Kind.IsComm() && (st.Stage == P-1 || st.Stage == P) && (st.Kind == ir.SendF || st.Kind == ir.RecvB) == (st.Stage == P-1):
					t.Errorf("order %v: %s crosses the copies' boundary", order, st)
				}
			}
		}
		for m := range M {
			first, last := q.Route(m)
			if !loads[[2]int{first, m}] || !loads[[2]int{last, m}] || len(loads) != 2*M {
				t.Errorf("order %v: micro %d: loads %v, want one at stages %d and %d", order, m, loads, first, last)
			}
		}
	}
	bad := p.Clone()
	for i, st := range bad.Ranks[0] {
		if st.Kind == ir.Forward && st.Stage == 0 && st.Micro == 0 {
			bad.Ranks[0][i].Micro = M / 2
		}
	}
	_, _, err = Lower(bad, Options{})
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Reason, "runs only stages 4..7") {
		t.Errorf("off-route step: Lower error %v, want one naming the route", err)
	}
}
