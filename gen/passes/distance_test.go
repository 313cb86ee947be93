package passes

import (
	"slices"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

func TestRecvDistance(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    float64
		perRank []float64
	}{
		{
			name:    "every receive right before its consumer",
			in:      "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0",
			want:    0,
			perRank: []float64{0, 0},
		},
		{
			name: "a receive posted two computes early; transfers between do not count",
			in: "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1RECV_F0 1RECV_F1 1F0 1B0 1SEND_B0 1F1 1B1 1SEND_B1",
			want:    0.5, // (0 + 0 + 0 + 2) / 4
			perRank: []float64{0, 1},
		},
		{
			name:    "overlap consumes its sub-steps' receives",
			in:      "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\nrank 1: 1RECV_F0 1F0 1RECV_F1 (1F1;1B0)OVERLAP_F_B 1SEND_B0 1B1 1SEND_B1",
			want:    0,
			perRank: []float64{0, 0},
		},
		{
			name: "an overlap is one compute step between a receive and its consumer",
			in: "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0F2 0SEND_F2 0RECV_B0 0B0 0RECV_B1 0B1 0RECV_B2 0B2\n" +
				"rank 1: 1RECV_F0 1F0 1RECV_F1 1RECV_F2 (1F1;1B0)OVERLAP_F_B 1SEND_B0 1F2 1B1 1SEND_B1 1B2 1SEND_B2",
			want:    1.0 / 6, // RECV_F2 waits through the overlap
			perRank: []float64{0, 1.0 / 3},
		},
		{
			name:    "RECV_F and DATA_RECV of one chunk count apart",
			in:      "rank 0: 0F0 0SEND_F0 0DATA_SEND0\nrank 1: 1RECV_F0 1B1 1DATA_RECV0 1F0",
			want:    0.5, // (1 + 0) / 2
			perRank: []float64{0, 0.5},
		},
		{
			name:    "no receives",
			in:      "rank 0: 0F0 0B0",
			want:    0,
			perRank: []float64{0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParse(tc.in)
			if got := RecvDistance(p); got != tc.want {
				t.Errorf("RecvDistance = %v, want %v", got, tc.want)
			}
			got := RecvDistances(p)
			for r := range tc.perRank {
				if got[r] != tc.perRank[r] {
					t.Errorf("RecvDistances = %v, want %v", got, tc.perRank)
					break
				}
			}
			// Measure gives the same figures from its one walk, and the
			// slot counts AssignSlots reports (SlotCounts').
			q, counts, err := AssignSlots(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				p     ir.Program
				slots []int
			}{{p, make([]int, len(p.Ranks))}, {q, counts}} {
				info := Measure(c.p)
				if info.RecvDistance != tc.want || !slices.Equal(info.RecvDistances, tc.perRank) {
					t.Errorf("Measure: RecvDistance %v, RecvDistances %v; want %v, %v", info.RecvDistance, info.RecvDistances, tc.want, tc.perRank)
				}
				if !slices.Equal(info.Slots, c.slots) || !slices.Equal(info.Slots, SlotCounts(c.p)) {
					t.Errorf("Measure: Slots %v, want %v (SlotCounts %v)", info.Slots, c.slots, SlotCounts(c.p))
				}
			}
		})
	}
}
