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

// TestRecvDistanceNaive: Measure's one walk against the definition read
// literally (for each receive, the compute steps from it to its first
// consumer on its rank), on lowered programs of every family in every comm
// order, overlaps and splits included.
func TestRecvDistanceNaive(t *testing.T) {
	consumes := func(c, recv ir.Step) bool {
		if c.Stage != recv.Stage || c.Micro != recv.Micro {
			return false
		}
		if recv.Kind == ir.RecvB {
			return c.Kind == ir.Backward || c.Kind == ir.BackwardInput
		}
		return c.Kind == ir.Forward
	}
	naive := func(p ir.Program) (sum, n int, slots []int) {
		for _, steps := range p.Ranks {
			for i, st := range steps {
				if st.Kind != ir.RecvF && st.Kind != ir.RecvB && st.Kind != ir.DataRecv {
					continue
				}
				k := 0
			scan:
				for _, c := range steps[i+1:] {
					if !c.Kind.IsCompute() {
						continue
					}
					for _, cs := range ir.ComputesAt([]ir.Step{c}, 0) {
						if consumes(cs, st) {
							sum, n = sum+k, n+1
							break scan
						}
					}
					k++
				}
			}
		}
		return sum, n, SlotCounts(p)
	}
	checked := 0
	for P := 2; P <= 4; P++ {
		for _, M := range []int{P, 2 * P} {
			for name, p := range families(P, M) {
				for _, o := range []Options{{}, {Comm: CommOptions{Order: Late}}, {Comm: CommOptions{Order: Eager}}, {Overlap: true}, {Split: true}} {
					q, _, err := RunPipeline(p, o)
					if err != nil {
						continue // an option the family does not take
					}
					ws, wn, wslots := naive(q)
					info := Measure(q)
					gs, gn := recvDistance(q, nil, nil)
					if gs != ws || gn != wn || !slices.Equal(info.Slots, wslots) || (wn > 0 && info.RecvDistance != float64(ws)/float64(wn)) {
						t.Fatalf("%s P=%d M=%d %+v: Measure sum %d of %d, slots %v; naive %d of %d, %v", name, P, M, o, gs, gn, info.Slots, ws, wn, wslots)
					}
					checked++
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d programs checked", checked)
	}
}
