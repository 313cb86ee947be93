package torch

import (
	"bytes"
	"slices"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// FuzzTorchCSV: the reader of PyTorch's CSV dialects (torch-csv and
// torch-csv-legacy) never panics, and what it accepts round-trips through
// the writer: the CSV ppgen writes for the program (legacy names for the
// legacy dialect) reads back to the same program. The seeds include the
// numbers that once exhausted memory or overflowed.
func FuzzTorchCSV(f *testing.F) {
	for _, s := range []struct {
		csv    string
		legacy bool
	}{
		{"0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", false},
		{"0F0,,3F0,3B0,,0B0\n1F0,2F0,,2B0,1B0,\n", false},
		{"0F0,0I0,0W0\n", false},
		{"0F0,0BW0\n", true},
		{"0F0,0B0,0W0\n", true},
		{"0UNSHARD,0F0,0B0,0REDUCE_GRAD,0RESHARD\n", false},
		{"(0F1;0B0)OVERLAP_F_B\n", false},
		{"0F4294967296,0B0\n", false},
		{"0F100000000\n", true},
		{"0F18446744073709551617,0BW0\n", true},
		{"\"0F0\",0B0\r\n", false},
	} {
		f.Add([]byte(s.csv), s.legacy)
	}
	f.Fuzz(func(t *testing.T, data []byte, legacy bool) {
		d := Current
		if legacy {
			d = Legacy
		}
		p, err := Read(bytes.NewReader(data), d)
		if err != nil {
			return
		}
		out := ir.FormatCSV(p)
		if legacy {
			out = legacyNames(out)
		}
		q, err := Read(bytes.NewReader(out), d)
		if err != nil {
			t.Fatalf("reading the written CSV back: %v\ninput %q\nwritten %q", err, data, out)
		}
		if p.Micro != q.Micro || p.Copies != q.Copies || p.Placement.NumRanks != q.Placement.NumRanks || !slices.Equal(p.Placement.RankOf, q.Placement.RankOf) {
			t.Fatalf("shape differs after a round trip: %+v / %+v", p.Placement, q.Placement)
		}
		for r := range p.Ranks {
			if !slices.EqualFunc(p.Ranks[r], q.Ranks[r], ir.Step.Equal) {
				t.Fatalf("rank %d differs after a round trip through %q:\n%v\n%v", r, out, p.Ranks[r], q.Ranks[r])
			}
		}
	})
}
