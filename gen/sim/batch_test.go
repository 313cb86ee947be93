package sim

import (
	"errors"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// crossedText is two ranks that each send before they receive in the
// middle of the iteration; batched says whether the pairs are batches.
func crossedText(batched bool) string {
	b, e := "", ""
	if batched {
		b, e = "BATCH_BEGIN ", " BATCH_END"
	}
	return "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 " + b + "0SEND_F1 0RECV_B0" + e + " 0B0 0RECV_B1 0B1 OPT_STEP\n" +
		"rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 " + b + "1SEND_B0 1RECV_F1" + e + " 1F1 1B1 1SEND_B1 OPT_STEP\n"
}

// TestBatchTiming: the transfers of a batch run concurrently and its
// consumers wait for the whole batch; unbatched, the crossed sends are
// stuck under the strict model.
func TestBatchTiming(t *testing.T) {
	c := DefaultCost()
	c.Comm = 1
	p, err := ir.ParseText(crossedText(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ResolvePeers(); err != nil {
		t.Fatal(err)
	}
	res, err := Run(p, c)
	if err != nil {
		t.Fatal(err)
	}
	// F0 0-1, SEND_F0 1-2, rank 1 F0 2-3 and B0 3-5; both batches are
	// posted by 5 and their two transfers run 5-6 side by side (one after
	// the other would end at 7); B0 and F1 6-8 and 6-7, B1 7-9, SEND_B1
	// 9-10, B1 on rank 0 10-12.
	if res.Makespan != 12 {
		t.Errorf("makespan %v, want 12", res.Makespan)
	}
	batched := map[string]bool{"0SEND_F1": true, "0RECV_B0": true, "1SEND_B0": true, "1RECV_F1": true}
	for _, ev := range res.Events {
		if batched[ev.Step.String()] && (ev.Start != 5 || ev.End != 6) {
			t.Errorf("%s on rank %d: %v-%v, want 5-6", ev.Step, ev.Rank, ev.Start, ev.End)
		}
	}
	p, err = ir.ParseText(crossedText(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ResolvePeers(); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(p, c); !errors.Is(err, ErrStuck) {
		t.Errorf("unbatched crossed sends: %v, want ErrStuck", err)
	}
}
