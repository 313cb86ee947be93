package sim

import (
	"math"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// TestGatherLossTiming: GATHER_LOSS is timed as a collective of its own:
// the ranks' steps start together once every host reached its own and
// every comm stream drained, and take (P−1)·comm, P−1 exchanges. The
// program is TestAllReduceTiming's with GATHER_LOSS at the end of each
// rank, after ALL_REDUCE and OPT_STEP (free): with comm=0.5 the reduction
// runs 7 to 7.5 and the gather 7.5 to 8; with comm=1 the backward ends at
// 8, the reduction runs to 9 and the gather 9 to 10.
func TestGatherLossTiming(t *testing.T) {
	const text = "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 ALL_REDUCE OPT_STEP GATHER_LOSS\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0 ALL_REDUCE OPT_STEP GATHER_LOSS\n"
	for _, tc := range []struct {
		cost       string
		start, end float64
	}{{"F=1,B=2,comm=0.5", 7.5, 8}, {"F=1,B=2,comm=1", 9, 10}} {
		p, err := ir.ParseText(text)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.ResolvePeers(); err != nil {
			t.Fatal(err)
		}
		c, err := ParseCost(tc.cost, 0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(p, c)
		if err != nil {
			t.Fatalf("%s: %v", tc.cost, err)
		}
		if math.Abs(res.Makespan-tc.end) > 1e-9 {
			t.Errorf("%s: makespan %v; want %v", tc.cost, res.Makespan, tc.end)
		}
		n := 0
		for _, ev := range res.Events {
			if ev.Step.Kind == abi.GatherLoss {
				n++
				if math.Abs(ev.Start-tc.start) > 1e-9 || math.Abs(ev.End-tc.end) > 1e-9 {
					t.Errorf("%s: rank %d's GATHER_LOSS runs %v..%v; want %v..%v", tc.cost, ev.Rank, ev.Start, ev.End, tc.start, tc.end)
				}
			}
		}
		if n != len(p.Ranks) {
			t.Errorf("%s: %d GATHER_LOSS events", tc.cost, n)
		}
	}
}
