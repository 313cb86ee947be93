package verify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/verify"
)

// TestFSDPRules: programs in text form, each breaking one FSDP rule, are
// rejected with the rule's code and reason at the offending step; the
// fixed versions pass.
func TestFSDPRules(t *testing.T) {
	const fixed = "rank 0: 0UNSHARD 0F0 0F1 0B0 0B1 0REDUCE_GRAD 0RESHARD OPT_STEP\n" +
		"rank 1: 1UNSHARD 1F0 1F1 1B0 1B1 1REDUCE_GRAD 1RESHARD OPT_STEP"
	if _, err := verify.Check(mustParse(fixed), verify.Options{}); err != nil {
		t.Fatalf("fixed program: %v", err)
	}
	// REDUCE_GRAD alone (PyTorch's form without resharding) is accepted.
	if _, err := verify.Check(mustParse("rank 0: 0F0 0B0 0REDUCE_GRAD OPT_STEP\nrank 1: 1F0 1B0 1REDUCE_GRAD OPT_STEP"), verify.Options{}); err != nil {
		t.Errorf("REDUCE_GRAD only: %v", err)
	}
	checkRejected(t, []rejected{
		{"compute while sharded", "rank 0: 0UNSHARD 0F0 0RESHARD 0F1 0UNSHARD 0B0 0B1 0REDUCE_GRAD 0RESHARD\nrank 1: 1F0 1F1 1B0 1B1 1REDUCE_GRAD",
			0, 3, verify.FSDP, "stage 0 computes while its parameters are sharded: its RESHARD at step 2 left it sharded"},
		{"unshard twice", "rank 0: 0UNSHARD 0UNSHARD 0F0 0F1 0B0 0B1 0REDUCE_GRAD 0RESHARD\nrank 1: 1F0 1F1 1B0 1B1 1REDUCE_GRAD",
			0, 1, verify.FSDP, "stage 0 is unsharded already (UNSHARD at step 0)"},
		{"reshard sharded", "rank 0: 0RESHARD 0UNSHARD 0F0 0F1 0B0 0B1 0REDUCE_GRAD 0RESHARD\nrank 1: 1F0 1F1 1B0 1B1 1REDUCE_GRAD",
			0, 0, verify.FSDP, "RESHARD needs an UNSHARD before it"},
		{"backward after reduce", "rank 0: 0UNSHARD 0F0 0F1 0B0 0REDUCE_GRAD 0B1 0RESHARD\nrank 1: 1F0 1F1 1B0 1B1 1REDUCE_GRAD",
			0, 5, verify.FSDP, "stage 0 computes after its REDUCE_GRAD at step 4"},
		{"reduce twice", "rank 0: 0F0 0F1 0B0 0B1 0REDUCE_GRAD 0REDUCE_GRAD\nrank 1: 1F0 1F1 1B0 1B1 1REDUCE_GRAD",
			0, 5, verify.Duplicate, "a second REDUCE_GRAD of stage 0"},
		{"reduce after the optimizer", "rank 0: 0F0 0F1 0B0 0B1 OPT_STEP 0REDUCE_GRAD\nrank 1: 1F0 1F1 1B0 1B1 1REDUCE_GRAD OPT_STEP",
			0, 5, verify.FSDP, "REDUCE_GRAD of stage 0 after OPT_STEP (step 4)"},
		{"reduce missing", "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1F1 1B0 1B1 1REDUCE_GRAD",
			0, -1, verify.Missing, "its gradients are never reduced"},
		{"left unsharded", "rank 0: 0UNSHARD 0F0 0F1 0B0 0B1 0REDUCE_GRAD\nrank 1: 1F0 1F1 1B0 1B1 1REDUCE_GRAD",
			0, 0, verify.FSDP, "stage 0 is still unsharded at the end of the iteration"},
	})
}

// rejected is a program in text form that Check must reject at (rank,
// index) with code and a reason containing reason.
type rejected struct {
	name, text  string
	rank, index int
	code        verify.Code
	reason      string
}

func checkRejected(t *testing.T, tests []rejected) {
	t.Helper()
	for _, tt := range tests {
		_, err := verify.Check(mustParse(tt.text), verify.Options{})
		var ve *verify.Error
		if !errors.As(err, &ve) || ve.Rank != tt.rank || ve.Index != tt.index || ve.Code != tt.code || !strings.Contains(ve.Reason, tt.reason) {
			t.Errorf("%s: %v (%#v)\nwant rank %d index %d code %v reason %q", tt.name, err, ve, tt.rank, tt.index, tt.code, tt.reason)
		}
	}
}
