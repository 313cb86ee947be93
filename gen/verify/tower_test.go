package verify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/verify"
)

// TestTowerExchanges: in a program that ships owned inputs, every rank's
// OPT_STEP is the tower's rendezvous (gradients back to the owners, the
// replicas' sum). A rank that sends a gradient after its OPT_STEP, which
// the first stage's rank waits on before its own, deadlocks under it; the
// same order without MPIPE_FWD_RECV (no tower can run) passes, and with
// OPT_STEP last on every rank the mpipe program passes.
func TestTowerExchanges(t *testing.T) {
	const (
		last = "rank 0: 0MPIPE_FWD_RECV1 0DATA_LOAD0 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 OPT_STEP\n" +
			"rank 1: 0DATA_LOAD1 0MPIPE_FWD_SEND1 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1 OPT_STEP"
		early = "rank 0: 0MPIPE_FWD_RECV1 0DATA_LOAD0 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 OPT_STEP\n" +
			"rank 1: 0DATA_LOAD1 0MPIPE_FWD_SEND1 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 OPT_STEP 1SEND_B1"
		plain = "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 OPT_STEP\n" +
			"rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1RECV_F1 1SEND_B0 1F1 1B1 OPT_STEP 1SEND_B1"
	)
	for _, tc := range []struct {
		name, prog string
		reason     string // "" passes
	}{
		{"OPT_STEP last", last, ""},
		{"a send after OPT_STEP, no owned inputs", plain, ""},
		{"a send after OPT_STEP, owned inputs", early, "OPT_STEP is a rendezvous of every rank when a trainable tower runs"},
	} {
		_, err := verify.Check(parse(t, tc.prog, ""), verify.Options{})
		if tc.reason == "" {
			if err != nil {
				t.Errorf("%s: rejected: %v", tc.name, err)
			}
			continue
		}
		var de *verify.DeadlockError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: err %v, want a deadlock with %q", tc.name, err, tc.reason)
		}
	}
}
