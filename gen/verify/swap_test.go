package verify_test

import (
	"testing"

	"github.com/ppgen/ppgen/gen/verify"
)

// TestSwapRules: a chunk's swap steps run in their order, once, after its
// forward, and its backward finds its activations back; each program breaks
// one rule, and the fixed one passes with a lower resident peak.
func TestSwapRules(t *testing.T) {
	const fixed = "rank 0: 0F0 0SWAP_LAUNCH_OFFLOAD0 0F1 0SWAP_WAIT_OFFLOAD0 0F2 0F3 0B3 0B2 0SWAP_LAUNCH_LOAD0 0B1 0SWAP_WAIT_LOAD0 0B0\n" +
		"rank 1: 1F0 1F1 1F2 1F3 1B3 1B2 1B1 1B0"
	rep, err := verify.Check(mustParse(fixed), verify.Options{})
	if err != nil {
		t.Fatalf("fixed program: %v", err)
	}
	if rep.PeakActivations[0] != 3 || rep.PeakActivations[1] != 4 {
		t.Errorf("resident peaks %v, want [3 4]: chunk (0, 0) is out from after 0F1 to before 0B1", rep.PeakActivations)
	}
	checkRejected(t, []rejected{
		{"offload before forward", "rank 0: 0SWAP_LAUNCH_OFFLOAD0 0F0 0F1 0F2 0B2 0B1 0B0\nrank 1: 1F0 1F1 1F2 1B2 1B1 1B0",
			0, 0, verify.Order, "offloads the activations of (stage 0, micro 0) before its forward ran"},
		{"wait before launch", "rank 0: 0F0 0SWAP_WAIT_OFFLOAD0 0F1 0F2 0B2 0B1 0B0\nrank 1: 1F0 1F1 1F2 1B2 1B1 1B0",
			0, 1, verify.Order, "0SWAP_WAIT_OFFLOAD0 comes before 0SWAP_LAUNCH_OFFLOAD0"},
		{"backward while out", "rank 0: 0F0 0SWAP_LAUNCH_OFFLOAD0 0F1 0SWAP_WAIT_OFFLOAD0 0F2 0B2 0B1 0B0\nrank 1: 1F0 1F1 1F2 1B2 1B1 1B0",
			0, 7, verify.Order, "0B0 needs the activations of its chunk, which are swapped out"},
		{"swapped twice", "rank 0: 0F0 0SWAP_LAUNCH_OFFLOAD0 0SWAP_LAUNCH_OFFLOAD0 0F1 0F2 0B2 0B1 0B0\nrank 1: 1F0 1F1 1F2 1B2 1B1 1B0",
			0, 2, verify.Duplicate, "runs twice for this chunk"},
		{"never back", "rank 0: 0F0 0SWAP_LAUNCH_OFFLOAD0 0F1 0SWAP_WAIT_OFFLOAD0 0F2 0B2 0B1\nrank 1: 1F0 1F1 1F2 1B2 1B1 1B0",
			0, -1, verify.Missing, "swapped out and never loaded back"},
	})
}
