package passes

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

func TestShipLabels(t *testing.T) {
	tests := []struct {
		name, in, place, want string
	}{
		{
			name: "three ranks: labels ride ahead of every activation, the last rank loads none",
			in: "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0\n" +
				"rank 1: 1RECV_F0 1F0 1SEND_F0 1RECV_B0 1B0 1SEND_B0\n" +
				"rank 2: 2DATA_LOAD0 2RECV_F0 2F0 2B0 2SEND_B0",
			want: "rank 0: 0DATA_LOAD0 0F0 0DATA_SEND0 0SEND_F0 0RECV_B0 0B0\n" +
				"rank 1: 1DATA_RECV0 1RECV_F0 1F0 1DATA_SEND0 1SEND_F0 1RECV_B0 1B0 1SEND_B0\n" +
				"rank 2: 2DATA_RECV0 2RECV_F0 2F0 2B0 2SEND_B0\n",
		},
		{
			name:  "V placement: the route ends where it starts, nothing to ship",
			in:    "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 3DATA_LOAD0 3RECV_F0 3F0 3B0 3SEND_B0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2B0 1B0 1SEND_B0",
			place: "0,1,1,0",
			want:  "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 3DATA_LOAD0 3RECV_F0 3F0 3B0 3SEND_B0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2B0 1B0 1SEND_B0\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := mustParse(tc.in)
			if tc.place != "" {
				pl, err := ir.ParsePlacement(tc.place, len(in.Ranks), 0)
				if err != nil {
					t.Fatal(err)
				}
				in.Placement = pl
				if err := in.ResolvePeers(); err != nil {
					t.Fatal(err)
				}
			}
			before := ir.FormatText(in)
			got, err := ShipLabels(in)
			if err != nil {
				t.Fatal(err)
			}
			if s := ir.FormatText(got); s != tc.want {
				t.Errorf("got\n%swant\n%s", s, tc.want)
			}
			if ir.FormatText(in) != before {
				t.Errorf("input modified")
			}
			again, err := ShipLabels(got)
			if err != nil || ir.FormatText(again) != tc.want {
				t.Errorf("not idempotent (%v):\n%s", err, ir.FormatText(again))
			}
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

// TestShipLabelsRefusesLocalHops: a label that reached a rank could only
// leave it as the same stage's, so a route with two neighbouring stages on
// one rank (ends on different ranks) is refused, naming them.
func TestShipLabelsRefusesLocalHops(t *testing.T) {
	p := mustParse("rank 0: 0F0 0B0\nrank 1: 1F0 2F0 2B0 1B0\nrank 2: 3F0 3B0")
	q, _, err := Lower(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ShipLabels(q)
	if err == nil || !strings.Contains(err.Error(), "micro 0's stages 1 and 2 are both on rank 1") {
		t.Errorf("err = %v, want the local-hop refusal", err)
	}
}
