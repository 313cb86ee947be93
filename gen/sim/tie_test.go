package sim

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// tied2 is a lowered two-rank program of one micro-batch with stages 0 and
// 1 tied; rank1 is rank 1's steps.
func tied2(t *testing.T, rank1 string) ir.Program {
	t.Helper()
	p, err := ir.ParseText("rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 0TIE_GRAD OPT_STEP\nrank 1: " + rank1 + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ResolvePeers(); err != nil {
		t.Fatal(err)
	}
	p.Ties = []ir.Tie{{A: 0, B: 1}}
	return p
}

// TestTieTiming: the two TIE_GRADs of a tie start together, when both
// hosts reached them and both comm streams drained, and take TieTime. By
// hand, with F=1, B=2, comm=0.5: rank 0's F0 ends at 1, the activation
// arrives at 1.5, rank 1 runs F0 to 2.5 and B0 to 4.5, the gradient
// arrives at 5, rank 0's B0 ends at 7; both exchanges run from 7 to 7.5.
// With param=4, bw=2 (dp=2, as param needs), they take 0.5 + 4/2 = 2.5.
func TestTieTiming(t *testing.T) {
	p := tied2(t, "1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0 1TIE_GRAD OPT_STEP")
	for _, tc := range []struct {
		cost string
		end  float64
	}{{"F=1,B=2,comm=0.5", 7.5}, {"F=1,B=2,comm=0.5,param=4,bw=2,dp=2", 9.5}} {
		c, err := ParseCost(tc.cost, 2)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(p, c)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(res.Makespan-tc.end) > 1e-9 {
			t.Errorf("%s: makespan %v; want %v", tc.cost, res.Makespan, tc.end)
		}
		for _, ev := range res.Events {
			if ev.Step.Kind == ir.TieGrad && math.Abs(ev.Start-7) > 1e-9 {
				t.Errorf("%s: rank %d's TIE_GRAD starts at %v; want 7 (both at it, streams drained)", tc.cost, ev.Rank, ev.Start)
			}
		}
	}
}

// TestTieDeadlock: rank 1 exchanging before it sends the gradient rank 0
// waits for cannot complete.
func TestTieDeadlock(t *testing.T) {
	p := tied2(t, "1RECV_F0 1DATA_LOAD0 1F0 1B0 1TIE_GRAD 1SEND_B0 OPT_STEP")
	c, err := ParseCost("F=1,B=2", 2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(p, c)
	if !errors.Is(err, ErrStuck) || !strings.Contains(err.Error(), "to reach its 0TIE_GRAD") {
		t.Fatalf("got %v; want a deadlock naming the wait for rank 0's TIE_GRAD", err)
	}
}
