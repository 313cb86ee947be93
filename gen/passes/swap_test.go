package passes

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/internal/testprog"
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
