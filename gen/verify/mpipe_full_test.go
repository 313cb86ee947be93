package verify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/verify"
)

// mpipeFull is mpipe at P = 2, M = 4, V = 1 in the full ownership mode
// (`ppgen show -schedule mpipe -ranks 2 -micro 4 -virtual 1 -mpipe-owners
// full`): rank 1 owns micro-batches 1 and 3, loads and ships both at its
// head; rank 0 receives both at its head, in micro-batch order.
const mpipeFull = "rank 0: 0MPIPE_FWD_RECV1 0MPIPE_FWD_RECV3 0DATA_LOAD0 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0DATA_LOAD2 0F2 0SEND_F2 0RECV_B1 0B1 0F3 0SEND_F3 0RECV_B2 0B2 0RECV_B3 0B3 OPT_STEP\n" +
	"rank 1: 0DATA_LOAD1 0MPIPE_FWD_SEND1 0DATA_LOAD3 0MPIPE_FWD_SEND3 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 1DATA_LOAD2 1RECV_F2 1SEND_B1 1F2 1B2 1DATA_LOAD3 1RECV_F3 1SEND_B2 1F3 1B3 1SEND_B3 OPT_STEP"

// TestCheckOwnedFull: the full mode's program verifies, and each mutation
// of its exchanges with the first stage's rank is rejected: receives out
// of micro-batch order (pairing), an owner's send behind its pipeline
// transfers (a deadlock under rendezvous), the first stage's own load
// removed, a received micro-batch loaded again, a receive never sent, a
// micro-batch loaded by a rank that does not own it.
func TestCheckOwnedFull(t *testing.T) {
	if _, err := verify.Check(parse(t, mpipeFull, ""), verify.Options{}); err != nil {
		t.Fatalf("good program rejected: %v", err)
	}
	r0, r1, _ := strings.Cut(mpipeFull, "\n")
	tests := []struct {
		name     string
		prog     string
		deadlock bool
		code     verify.Code
		reason   string
	}{
		{
			name:   "receives out of micro-batch order",
			prog:   strings.Replace(mpipeFull, "0MPIPE_FWD_RECV1 0MPIPE_FWD_RECV3", "0MPIPE_FWD_RECV3 0MPIPE_FWD_RECV1", 1),
			reason: "sends and receives between two ranks must come in the same order on both",
		},
		{
			name:     "an owner ships an overflow micro-batch after its pipeline transfers",
			prog:     r0 + "\n" + strings.Replace(strings.Replace(r1, "0DATA_LOAD3 0MPIPE_FWD_SEND3 ", "", 1), "OPT_STEP", "0DATA_LOAD3 0MPIPE_FWD_SEND3 OPT_STEP", 1),
			deadlock: true,
		},
		{
			name: "the first stage's own overflow load removed",
			prog: strings.Replace(mpipeFull, "0DATA_LOAD2 0F2", "0F2", 1) + "",
			code: verify.Order, reason: "0F2 needs its input",
		},
		{
			name: "a received micro-batch loaded again",
			prog: strings.Replace(mpipeFull, "0F3 0SEND_F3", "0DATA_LOAD3 0F3 0SEND_F3", 1),
			code: verify.Structure, reason: "0F3 takes an input that arrives twice",
		},
		{
			name: "a receive never sent",
			prog: r0 + "\n" + strings.Replace(r1, "0DATA_LOAD3 0MPIPE_FWD_SEND3 ", "", 1),
			code: verify.Unmatched, reason: "MPIPE_FWD_SEND",
		},
		{
			name: "rank 0's micro-batch loaded by rank 1",
			prog: strings.Replace(strings.Replace(mpipeFull, "0DATA_LOAD2 0F2", "0F2", 1), "0DATA_LOAD3 0MPIPE_FWD_SEND3", "0DATA_LOAD3 0MPIPE_FWD_SEND3 0DATA_LOAD2", 1),
			code: verify.Structure, reason: "only micro 2's owner (rank 0) may load its input",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify.Check(parse(t, tc.prog, ""), verify.Options{})
			if err == nil {
				t.Fatalf("mutated program accepted:\n%s", tc.prog)
			}
			if tc.deadlock {
				var dl *verify.DeadlockError
				if !errors.As(err, &dl) {
					t.Errorf("err = %v, want a deadlock", err)
				}
				return
			}
			var e *verify.Error
			if tc.code == 0 {
				if !strings.Contains(err.Error(), tc.reason) {
					t.Errorf("err = %v\nwant one containing %q", err, tc.reason)
				}
				return
			}
			if !errors.As(err, &e) || e.Code != tc.code || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("err = %v (code %v)\nwant %s containing %q", err, codeOf(err), tc.code, tc.reason)
			}
		})
	}
}
