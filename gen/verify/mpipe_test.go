package verify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/verify"
)

// mpipeGood is a two-rank, two-stage program whose micro 1 is loaded by its
// owner, rank 1, and shipped to stage 0 (passes.OwnedData's form).
const mpipeGood = "rank 0: 0MPIPE_FWD_RECV1 0DATA_LOAD0 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
	"rank 1: 0DATA_LOAD1 0MPIPE_FWD_SEND1 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1"

func TestCheckOwnedMicros(t *testing.T) {
	if _, err := verify.Check(parse(t, mpipeGood, ""), verify.Options{}); err != nil {
		t.Fatalf("good program rejected: %v", err)
	}
	tests := []struct {
		name   string
		prog   string
		code   verify.Code
		reason string
	}{
		{
			name: "send before the owner's load",
			prog: "rank 0: 0MPIPE_FWD_RECV1 0DATA_LOAD0 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 0MPIPE_FWD_SEND1 0DATA_LOAD1 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1",
			code: verify.Order, reason: "0MPIPE_FWD_SEND1 needs the input it ships: 0DATA_LOAD1 must come earlier on rank 1",
		},
		{
			name: "a rank loads a stage-0 input it does not own",
			prog: "rank 0: 0MPIPE_FWD_RECV1 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 0DATA_LOAD0 0DATA_LOAD1 0MPIPE_FWD_SEND1 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1",
			code: verify.Structure, reason: "only micro 0's owner (rank 0) may load its input for another rank's stage",
		},
		{
			name: "forward with neither load nor receive",
			prog: "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1",
			code: verify.Order, reason: "0F1 needs its input: 0DATA_LOAD1 must come earlier on rank 0",
		},
		{
			name: "forward before the receive of its owned input",
			prog: "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0F1 0MPIPE_FWD_RECV1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 0DATA_LOAD1 0MPIPE_FWD_SEND1 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1",
			code: verify.Order, reason: "0F1 needs its input from its owner: 0MPIPE_FWD_RECV1 must come earlier on rank 0",
		},
		{
			name: "receive of a micro-batch the rank owns itself",
			prog: "rank 0: 0MPIPE_FWD_RECV0 0F0 0SEND_F0 0DATA_LOAD1 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1",
			code: verify.Structure, reason: "micro 0's owner is this rank (0)",
		},
		{
			name: "receive never sent",
			prog: "rank 0: 0MPIPE_FWD_RECV1 0DATA_LOAD0 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1",
			code: verify.Unmatched, reason: "MPIPE_FWD_SEND",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify.Check(parse(t, tc.prog, ""), verify.Options{})
			var e *verify.Error
			if !errors.As(err, &e) || e.Code != tc.code || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("err = %v (code %v)\nwant %s containing %q", err, codeOf(err), tc.code, tc.reason)
			}
		})
	}
}

// TestCheckOwnedMicroDeadlock: the owner's send is its first transfer, so
// the first stage's rank must take the receive before anything the owner
// waits for. Receiving it after the first SEND_F closes a cycle.
func TestCheckOwnedMicroDeadlock(t *testing.T) {
	bad := "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0MPIPE_FWD_RECV1 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
		"rank 1: 0DATA_LOAD1 0MPIPE_FWD_SEND1 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1"
	_, err := verify.Check(parse(t, bad, ""), verify.Options{})
	var dl *verify.DeadlockError
	if !errors.As(err, &dl) {
		t.Fatalf("err = %v, want a deadlock", err)
	}
	var steps []string
	for _, w := range dl.Cycle {
		steps = append(steps, w.Step.String())
	}
	if got := strings.Join(steps, " "); !strings.Contains(got, "0SEND_F0") || !strings.Contains(got, "0MPIPE_FWD_SEND1") {
		t.Errorf("cycle %s, want 0SEND_F0 and 0MPIPE_FWD_SEND1 in it", got)
	}
}
