package passes

import (
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/internal/testprog"
	"github.com/ppgen/ppgen/gen/ir"
)

// TestSwapPlacement: on one rank running 0F0 0F1 0F2 0F3 0B3 0B2 0B1 0B0,
// gap 2 swaps the chunks with at least two compute steps between forward
// and backward, each around the compute steps that hide its transfers.
func TestSwapPlacement(t *testing.T) {
	p := testprog.MustParse("rank 0: 0F0 0F1 0F2 0F3 0B3 0B2 0B1 0B0")
	q, err := Swap(p, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range q.Ranks[0] {
		got = append(got, st.String())
	}
	// Compute steps between forward and backward: chunk 0 6, chunk 1 4,
	// chunk 2 2, chunk 3 none.
	want := "0F0 0SWAP_LAUNCH_OFFLOAD0 0F1 0SWAP_WAIT_OFFLOAD0 0SWAP_LAUNCH_OFFLOAD1 0F2 0SWAP_WAIT_OFFLOAD1 " +
		"0SWAP_LAUNCH_OFFLOAD2 0F3 0SWAP_WAIT_OFFLOAD2 0SWAP_LAUNCH_LOAD2 0B3 0SWAP_LAUNCH_LOAD1 0SWAP_WAIT_LOAD2 0B2 " +
		"0SWAP_LAUNCH_LOAD0 0SWAP_WAIT_LOAD1 0B1 0SWAP_WAIT_LOAD0 0B0"
	if strings.Join(got, " ") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, " "), want)
	}
	if _, err := Swap(p, 1); err == nil || !strings.Contains(err.Error(), "gap 1") {
		t.Errorf("gap 1: %v", err)
	}
	if q, _ := Swap(p, 7); len(q.Ranks[0]) != len(p.Ranks[0]) {
		t.Errorf("gap 7 swapped something: %v", q.Ranks[0])
	}
}

// TestSwapDistances: the distances are where the chunks Swap offloads
// change. On the one rank of TestSwapPlacement (gaps 6, 4, 2) and on a
// two-rank 1F1B with an I/W split (the backward counted from its I: rank
// 0's chunks wait 2, 3, 4 and 4 compute steps, rank 1's none), each
// listed distance offloads more chunks than the next gap up, and no other
// gap does.
func TestSwapDistances(t *testing.T) {
	for _, tc := range []struct {
		prog string
		want []int
	}{
		{"rank 0: 0F0 0F1 0F2 0F3 0B3 0B2 0B1 0B0", []int{6, 4, 2}},
		{"rank 0: 0F0 0F1 0F2 0I0 0F3 0I1 0W0 0I2 0W1 0I3 0W2 0W3\nrank 1: 1F0 1I0 1F1 1I1 1F2 1I2 1F3 1I3 1W0 1W1 1W2 1W3", []int{4, 3, 2}},
		{"rank 0: 0F0 0B0 0F1 0B1", nil},
	} {
		p := testprog.MustParse(tc.prog)
		got := SwapDistances(p)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, want %v", tc.prog, got, tc.want)
		}
		offloads := func(gap int) int {
			q, err := Swap(p, gap)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, steps := range q.Ranks {
				for _, st := range steps {
					if st.Kind == ir.SwapLaunchOffload {
						n++
					}
				}
			}
			return n
		}
		for gap := 2; gap <= 8; gap++ {
			if changes := offloads(gap) != offloads(gap+1); changes != slices.Contains(got, gap) {
				t.Errorf("%q: -swap %d offloads %d chunks, -swap %d %d; distances %v", tc.prog, gap, offloads(gap), gap+1, offloads(gap+1), got)
			}
		}
	}
}
