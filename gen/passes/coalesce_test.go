package passes

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/verify"
)

func mustLowered(t *testing.T, text string) ir.Program {
	t.Helper()
	p := mustParse(text)
	if err := p.ResolvePeers(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCoalesce(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"a send and a receive on each rank", crossed,
			"rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 BATCH_BEGIN 0SEND_F1 0RECV_B0 BATCH_END 0B0 0RECV_B1 0B1 OPT_STEP\n" +
				"rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 BATCH_BEGIN 1SEND_B0 1RECV_F1 BATCH_END 1F1 1B1 1SEND_B1 OPT_STEP\n"},
		{"a local step ends a run", strings.Replace(crossed, "1DATA_LOAD1 1SEND_B0", "1SEND_B0 1DATA_LOAD1", 1),
			"rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 BATCH_BEGIN 0SEND_F1 0RECV_B0 BATCH_END 0B0 0RECV_B1 0B1 OPT_STEP\n" +
				"rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1SEND_B0 1DATA_LOAD1 1RECV_F1 1F1 1B1 1SEND_B1 OPT_STEP\n"},
		{"batches already there are kept", strings.Replace(crossed, "0SEND_F1 0RECV_B0", "BATCH_BEGIN 0SEND_F1 BATCH_END 0RECV_B0", 1),
			"rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 BATCH_BEGIN 0SEND_F1 BATCH_END 0RECV_B0 0B0 0RECV_B1 0B1 OPT_STEP\n" +
				"rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 BATCH_BEGIN 1SEND_B0 1RECV_F1 BATCH_END 1F1 1B1 1SEND_B1 OPT_STEP\n"},
		{"labels relayed in one run split it", relay,
			"rank 0: 0DATA_LOAD0 0DATA_SEND0 0F0 BATCH_BEGIN 0SEND_F0 0RECV_B0 BATCH_END 0B0 OPT_STEP\n" +
				"rank 1: 1DATA_RECV0 BATCH_BEGIN 1DATA_SEND0 1RECV_F0 BATCH_END 1F0 BATCH_BEGIN 1SEND_F0 1RECV_B0 BATCH_END 1B0 1SEND_B0 OPT_STEP\n" +
				"rank 2: BATCH_BEGIN 2DATA_RECV0 2RECV_F0 BATCH_END 2F0 2B0 2SEND_B0 OPT_STEP\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParse(tc.in)
			before := ir.FormatText(p)
			q, err := Coalesce(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := rankLines(q); got != tc.want {
				t.Errorf("Coalesce:\n%s\nwant\n%s", got, tc.want)
			}
			if ir.FormatText(p) != before {
				t.Error("Coalesce modified its input")
			}
		})
	}
}

// relay ships the labels of micro 0 along three ranks; rank 1 relays them
// before it receives the activation.
const relay = "rank 0: 0DATA_LOAD0 0DATA_SEND0 0F0 0SEND_F0 0RECV_B0 0B0 OPT_STEP\n" +
	"rank 1: 1DATA_RECV0 1DATA_SEND0 1RECV_F0 1F0 1SEND_F0 1RECV_B0 1B0 1SEND_B0 OPT_STEP\n" +
	"rank 2: 2DATA_RECV0 2RECV_F0 2F0 2B0 2SEND_B0 OPT_STEP\n"

// crossed is two ranks that each send before they receive: a deadlock
// under rendezvous one transfer at a time.
const crossed = "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 OPT_STEP\n" +
	"rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1DATA_LOAD1 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1 OPT_STEP\n"

// TestCoalesceMakesSafe: a program that deadlocks under rendezvous
// unbatched is safe once its adjacent send and receive are one batch, on
// one rank or on both.
func TestCoalesceMakesSafe(t *testing.T) {
	p := mustLowered(t, crossed)
	var de *verify.DeadlockError
	if _, err := verify.Check(p, verify.Options{}); !errors.As(err, &de) {
		t.Fatalf("unbatched: %v, want a deadlock", err)
	}
	q, _ := Coalesce(p)
	rep, err := verify.Check(q, verify.Options{})
	if err != nil {
		t.Fatalf("batched: %v", err)
	}
	if rep.Batches != 2 {
		t.Errorf("verify counted %d batches, want 2", rep.Batches)
	}
	// One side batched is enough: its send and receive wait for no order.
	one := mustLowered(t, strings.Replace(crossed, "0SEND_F1 0RECV_B0", "BATCH_BEGIN 0SEND_F1 0RECV_B0 BATCH_END", 1))
	if _, err := verify.Check(one, verify.Options{}); err != nil {
		t.Errorf("rank 0 batched: %v", err)
	}
}

// TestCoalesceRefusesLabelRelay: merging a DATA_RECV with the DATA_SEND that
// relays the same labels would deadlock (the send waits for the labels,
// which arrive only with the batch it is in, posted after it); the pass
// splits the run there, and verify refuses the merged batch.
func TestCoalesceRefusesLabelRelay(t *testing.T) {
	p := mustLowered(t, relay)
	if _, err := verify.Check(p, verify.Options{}); err != nil {
		t.Fatalf("unbatched: %v", err)
	}
	q, _ := Coalesce(p)
	if _, err := verify.Check(q, verify.Options{}); err != nil {
		t.Fatalf("coalesced: %v", err)
	}
	merged := mustLowered(t, strings.Replace(relay, "1DATA_RECV0 1DATA_SEND0 1RECV_F0", "BATCH_BEGIN 1DATA_RECV0 1DATA_SEND0 1RECV_F0 BATCH_END", 1))
	var ve *verify.Error
	if _, err := verify.Check(merged, verify.Options{}); !errors.As(err, &ve) || !strings.Contains(err.Error(), "would wait for the batch it is in") {
		t.Errorf("the merged relay: %v, want it refused", err)
	}
}

// TestCoalesceKeepsSafe checks the argument of docs/design.md §6 on random
// programs: every program verify accepts, lowered from random feasible
// orders in every comm order and then disturbed by random swaps of
// adjacent steps, stays safe once coalesced; and none that verify rejects
// unbatched for other reasons than a deadlock is accepted batched.
func TestCoalesceKeepsSafe(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 4))
	safe, unsafe, fixed := 0, 0, 0
	for trial := range 600 {
		P := 2 + rng.IntN(3)
		V := 1 + rng.IntN(2)
		pl := ir.Loop(P, V)
		p := randomFeasible(rng, pl, 1+rng.IntN(6))
		order := []CommOrder{Timed, Late, Eager}[trial%3]
		q, _, err := Lower(p, Options{Comm: CommOptions{Order: order}})
		if err != nil {
			t.Fatal(err)
		}
		for range rng.IntN(3) {
			r := rng.IntN(len(q.Ranks))
			if n := len(q.Ranks[r]); n > 1 {
				i := rng.IntN(n - 1)
				q.Ranks[r][i], q.Ranks[r][i+1] = q.Ranks[r][i+1], q.Ranks[r][i]
			}
		}
		_, before := verify.Check(q, verify.Options{})
		b, _ := Coalesce(q)
		_, after := verify.Check(b, verify.Options{})
		var de *verify.DeadlockError
		switch {
		case before == nil && after != nil:
			t.Fatalf("trial %d: safe unbatched, refused batched: %v\n%s\nbatched:\n%s", trial, after, ir.FormatText(q), ir.FormatText(b))
		case before == nil:
			safe++
		case !errors.As(before, &de) && after == nil:
			t.Fatalf("trial %d: unbatched %v, but batched accepted", trial, before)
		case errors.As(before, &de) && after == nil:
			fixed++
		default:
			unsafe++
		}
	}
	t.Logf("%d safe programs stayed safe; %d deadlocks removed by batching; %d others rejected both ways", safe, fixed, unsafe)
	if safe < 150 || fixed == 0 {
		t.Errorf("%d safe programs and %d deadlocks removed among the trials; want at least 150 and 1", safe, fixed)
	}
}

// FuzzCoalesce: on a random lowered program, disturbed by swaps of adjacent
// steps, Coalesce only adds brackets (dropping them gives the program
// back), is idempotent, and keeps a program verify accepts accepted.
func FuzzCoalesce(f *testing.F) {
	f.Add(uint64(1), uint8(2), uint8(1), uint8(4), uint8(0), []byte{})
	f.Add(uint64(7), uint8(4), uint8(2), uint8(8), uint8(1), []byte{3, 9, 200})
	f.Add(uint64(12), uint8(3), uint8(1), uint8(5), uint8(2), []byte{1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, seed uint64, P, V, M, order uint8, swaps []byte) {
		pl := ir.Loop(1+int(P%4), 1+int(V%2))
		rng := rand.New(rand.NewPCG(seed, 0))
		p := randomFeasible(rng, pl, 1+int(M%8))
		q, _, err := Lower(p, Options{Comm: CommOptions{Order: []CommOrder{Timed, Late, Eager}[order%3]}})
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k+1 < len(swaps) && k < 16; k += 2 {
			r := int(swaps[k]) % len(q.Ranks)
			if n := len(q.Ranks[r]); n > 1 {
				i := int(swaps[k+1]) % (n - 1)
				q.Ranks[r][i], q.Ranks[r][i+1] = q.Ranks[r][i+1], q.Ranks[r][i]
			}
		}
		b, err := Coalesce(q)
		if err != nil {
			t.Fatal(err)
		}
		bb, _ := Coalesce(b)
		if ir.FormatText(bb) != ir.FormatText(b) {
			t.Fatalf("not idempotent:\n%s\nthen\n%s", ir.FormatText(b), ir.FormatText(bb))
		}
		for r := range b.Ranks {
			var kept []ir.Step
			for _, st := range b.Ranks[r] {
				if !st.Kind.IsBatch() {
					kept = append(kept, st)
				}
			}
			if len(kept) != len(q.Ranks[r]) {
				t.Fatalf("rank %d: %d steps without the brackets, %d before", r, len(kept), len(q.Ranks[r]))
			}
			for i := range kept {
				if !kept[i].Equal(q.Ranks[r][i]) {
					t.Fatalf("rank %d step %d: %s, was %s", r, i, kept[i], q.Ranks[r][i])
				}
			}
		}
		if _, err := verify.Check(q, verify.Options{}); err == nil {
			if _, err := verify.Check(b, verify.Options{}); err != nil {
				t.Fatalf("safe unbatched, refused batched: %v\n%s", err, ir.FormatText(b))
			}
		}
	})
}
