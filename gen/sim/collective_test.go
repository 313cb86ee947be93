package sim

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestAllReduceTiming: the ALL_REDUCE steps of every rank start together,
// when every host reached its own and every comm stream drained, and take
// Cost.AllReduceTime (comm plus allreduce). By hand, with F=1, B=2,
// comm=0.5: rank 0's F0 ends at 1, the activation arrives at 1.5, rank 1
// runs F0 to 2.5 and B0 to 4.5, the gradient arrives at 5, rank 0's B0
// ends at 7; both reductions run from 7 to 7.5 (allreduce=0) or 8.5
// (allreduce=1).
func TestAllReduceTiming(t *testing.T) {
	p, err := ir.ParseText("rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 ALL_REDUCE OPT_STEP\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0 ALL_REDUCE OPT_STEP\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ResolvePeers(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cost string
		end  float64
	}{{"F=1,B=2,comm=0.5", 7.5}, {"F=1,B=2,comm=0.5,allreduce=1", 8.5}} {
		c, err := ParseCost(tc.cost, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.String(); strings.Contains(got, "allreduce") != strings.Contains(tc.cost, "allreduce") {
			t.Errorf("%s: String %q; want allreduce written only when set", tc.cost, got)
		}
		res, err := Run(p, c)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(res.Makespan-tc.end) > 1e-9 {
			t.Errorf("%s: makespan %v; want %v", tc.cost, res.Makespan, tc.end)
		}
		for _, ev := range res.Events {
			if ev.Step.Kind.IsCollective() && math.Abs(ev.Start-7) > 1e-9 {
				t.Errorf("%s: rank %d's ALL_REDUCE starts at %v; want 7 (every rank at it, streams drained)", tc.cost, ev.Rank, ev.Start)
			}
		}
	}
}

// TestAllReduceStuck: a rank that reduces before the send its peer waits
// for, or a rank without the reduction, leaves the program stuck, and the
// report says who waits for whom.
func TestAllReduceStuck(t *testing.T) {
	for _, tc := range []struct{ rank1, words string }{
		{"1RECV_F0 1DATA_LOAD0 1F0 1B0 ALL_REDUCE 1SEND_B0 OPT_STEP", "to reach its ALL_REDUCE"},
		{"1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0 OPT_STEP", "never posts its ALL_REDUCE"},
	} {
		p, err := ir.ParseText("rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 ALL_REDUCE OPT_STEP\nrank 1: " + tc.rank1 + "\n")
		if err != nil {
			t.Fatal(err)
		}
		if err := p.ResolvePeers(); err != nil {
			t.Fatal(err)
		}
		_, err = Run(p, DefaultCost())
		if !errors.Is(err, ErrStuck) || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("rank 1 %q: got %v; want stuck, saying %q", tc.rank1, err, tc.words)
		}
	}
}
