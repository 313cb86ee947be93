package passes

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

func TestOwnedData(t *testing.T) {
	tests := []struct {
		name string
		in   string // after data insertion
		want string
	}{
		{
			name: "two ranks: rank 1 owns micro 1",
			in:   "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\nrank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1SEND_B0 1DATA_LOAD1 1RECV_F1 1F1 1B1 1SEND_B1",
			want: "rank 0: 0MPIPE_FWD_RECV1 0DATA_LOAD0 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 0DATA_LOAD1 0MPIPE_FWD_SEND1 1DATA_LOAD0 1RECV_F0 1F0 1B0 1SEND_B0 1DATA_LOAD1 1RECV_F1 1F1 1B1 1SEND_B1\n",
		},
		{
			name: "three ranks, two micro-batches: only the first min(P, M) are owned",
			in:   "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\nrank 1: 1RECV_F0 1F0 1SEND_F0 1RECV_F1 1F1 1SEND_F1 1RECV_B0 1B0 1SEND_B0 1RECV_B1 1B1 1SEND_B1\nrank 2: 2DATA_LOAD0 2RECV_F0 2F0 2B0 2SEND_B0 2DATA_LOAD1 2RECV_F1 2F1 2B1 2SEND_B1",
			want: "rank 0: 0MPIPE_FWD_RECV1 0DATA_LOAD0 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 0DATA_LOAD1 0MPIPE_FWD_SEND1 1RECV_F0 1F0 1SEND_F0 1RECV_F1 1F1 1SEND_F1 1RECV_B0 1B0 1SEND_B0 1RECV_B1 1B1 1SEND_B1\n" +
				"rank 2: 2DATA_LOAD0 2RECV_F0 2F0 2B0 2SEND_B0 2DATA_LOAD1 2RECV_F1 2F1 2B1 2SEND_B1\n",
		},
		{
			name: "one rank owns everything: unchanged",
			in:   "rank 0: 0DATA_LOAD0 0F0 0B0 0DATA_LOAD1 0F1 0B1",
			want: "rank 0: 0DATA_LOAD0 0F0 0B0 0DATA_LOAD1 0F1 0B1\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := mustParse(tc.in)
			before := ir.FormatText(in)
			got, err := OwnedData(in)
			if err != nil {
				t.Fatal(err)
			}
			if s := ir.FormatText(got); s != tc.want {
				t.Errorf("got\n%swant\n%s", s, tc.want)
			}
			if ir.FormatText(in) != before {
				t.Errorf("input modified")
			}
			again, err := OwnedData(got)
			if err != nil || ir.FormatText(again) != tc.want {
				t.Errorf("not idempotent (%v):\n%s", err, ir.FormatText(again))
			}
			// The owners' steps carry the peers the placement gives.
			for r, steps := range got.Ranks {
				for _, st := range steps {
					if st.Kind.IsComm() && st.Peer != got.Placement.PeerOfStep(st) {
						t.Errorf("rank %d %s: peer %d, want %d", r, st, st.Peer, got.Placement.PeerOfStep(st))
					}
				}
			}
		})
	}
}

func TestOwnedDataRefusesCopies(t *testing.T) {
	p := mustParse("rank 0: 0F0 0B0 1F1 1B1")
	p.Copies = 2
	if _, err := OwnedData(p); err == nil || !strings.Contains(err.Error(), "one pipeline") {
		t.Errorf("err = %v, want the one-pipeline refusal", err)
	}
}

// TestLowerOwnedData: through Lower, the owners' steps get no slot and the
// first stage's receives take the chunk slots, and the result verifies
// (gen's family tests lower mpipe over the whole P, V, M grid).
func TestLowerOwnedData(t *testing.T) {
	p := mustParse("rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1")
	q, info, err := Lower(p, Options{OwnedData: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(info.Passes, ","), "mpipe") {
		t.Errorf("passes %v lack mpipe", info.Passes)
	}
	for r, steps := range q.Ranks {
		for _, st := range steps {
			switch {
			case q.OwnerStep(r, st) && st.Slot != ir.None:
				t.Errorf("rank %d owner step %s has slot %d", r, st, st.Slot)
			case st.Kind == ir.MpipeRecv && st.Slot < 0:
				t.Errorf("rank %d %s has no slot", r, st)
			}
		}
	}
}

// TestOwnedDataFull: in the full mode every micro-batch is owned, micro m by
// rank m mod min(P, M); each owner loads and ships its micro-batches at its
// head in increasing order, and the first stage's rank receives all of them
// at its head, in micro-batch order, loading only the ones it owns.
func TestOwnedDataFull(t *testing.T) {
	in := mustParse("rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 0SEND_F1 0DATA_LOAD2 0F2 0SEND_F2 0DATA_LOAD3 0F3 0SEND_F3 0RECV_B0 0B0 0RECV_B1 0B1 0RECV_B2 0B2 0RECV_B3 0B3\n" +
		"rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1SEND_B0 1DATA_LOAD1 1RECV_F1 1F1 1B1 1SEND_B1 1DATA_LOAD2 1RECV_F2 1F2 1B2 1SEND_B2 1DATA_LOAD3 1RECV_F3 1F3 1B3 1SEND_B3")
	want := "rank 0: 0MPIPE_FWD_RECV1 0MPIPE_FWD_RECV3 0DATA_LOAD0 0F0 0SEND_F0 0F1 0SEND_F1 0DATA_LOAD2 0F2 0SEND_F2 0F3 0SEND_F3 0RECV_B0 0B0 0RECV_B1 0B1 0RECV_B2 0B2 0RECV_B3 0B3\n" +
		"rank 1: 0DATA_LOAD1 0MPIPE_FWD_SEND1 0DATA_LOAD3 0MPIPE_FWD_SEND3 1DATA_LOAD0 1RECV_F0 1F0 1B0 1SEND_B0 1DATA_LOAD1 1RECV_F1 1F1 1B1 1SEND_B1 1DATA_LOAD2 1RECV_F2 1F2 1B2 1SEND_B2 1DATA_LOAD3 1RECV_F3 1F3 1B3 1SEND_B3\n"
	for _, mode := range []string{OwnersFull} {
		got, err := OwnedDataMode(in, mode)
		if err != nil {
			t.Fatal(err)
		}
		if s := ir.FormatText(got); s != want {
			t.Errorf("%s: got\n%swant\n%s", mode, s, want)
		}
	}
	min, err := OwnedDataMode(in, "")
	if err != nil {
		t.Fatal(err)
	}
	if s := ir.FormatText(min); strings.Contains(s, "RECV3") || !strings.Contains(s, "MPIPE_FWD_RECV1") {
		t.Errorf("min mode: got\n%s, want only micro 1 shipped", s)
	}
}

func TestParseOwners(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", OwnersMin, ""}, {"min", OwnersMin, ""}, {"full", OwnersFull, ""}, {"all", "", "want min"},
	} {
		got, err := ParseOwners(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseOwners(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
	if _, err := OwnedDataMode(mustParse("rank 0: 0F0"), "some"); err == nil {
		t.Errorf("OwnedDataMode with a bad mode: no error")
	}
}

// TestOwnedDataFullRefusesIdleOwners: with M < P the full mode would leave
// a rank owning nothing; it says so, naming the rank.
func TestOwnedDataFullRefusesIdleOwners(t *testing.T) {
	p := mustParse("rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1SEND_F0 1RECV_B0 1B0 1SEND_B0\nrank 2: 2DATA_LOAD0 2RECV_F0 2F0 2B0 2SEND_B0")
	_, err := OwnedDataMode(p, OwnersFull)
	if err == nil || !strings.Contains(err.Error(), "rank 1 would own no micro-batch (M = 1 < P = 3)") {
		t.Errorf("err = %v, want the refusal naming rank 1", err)
	}
	if _, err := OwnedDataMode(p, OwnersMin); err != nil {
		t.Errorf("min mode: %v", err)
	}
}
