package swap_test

import (
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/swap"
)

// TestAccounting plays a chunk life cycle on a tier step by step and checks
// the resident and offloaded figures after each step.
func TestAccounting(t *testing.T) {
	// chunk k has k+1 float64 values: 8(k+1) bytes
	chunk := func(k int) []*tensor.Dense {
		return []*tensor.Dense{tensor.New(tensor.WithShape(k+1), tensor.WithBacking(make([]float64, k+1)))}
	}
	type want struct{ res, peak, resChunks, peakChunks, out, maxChunk int64 }
	for _, tc := range tiers {
		t.Run(tc.name, func(t *testing.T) {
			tier := tc.make(t)
			defer tier.Close()
			hs := map[int]*swap.Handle{}
			steps := []struct {
				name string
				do   func() error
				want want
			}{
				{"F0", func() error { tier.Track(8); return nil }, want{8, 8, 1, 1, 0, 8}},
				{"F1", func() error { tier.Track(16); return nil }, want{24, 24, 2, 2, 0, 16}},
				{"offload 0", func() error {
					h, err := tier.Offload(chunk(0), "0")
					hs[0] = h
					if err != nil {
						return err
					}
					return tier.Wait(h)
				}, want{16, 24, 1, 2, 8, 16}},
				{"F2", func() error { tier.Track(24); return nil }, want{40, 40, 2, 2, 8, 24}},
				{"offload 1", func() error {
					h, err := tier.Offload(chunk(1), "1")
					hs[1] = h
					if err != nil {
						return err
					}
					return tier.Wait(h)
				}, want{24, 40, 1, 2, 24, 24}},
				{"reset peak", func() error { tier.ResetPeak(); return nil }, want{24, 24, 1, 1, 24, 24}},
				{"load 0", func() error { _, err := tier.Load(hs[0]); return err }, want{32, 32, 2, 2, 16, 24}},
				{"I0 shrinks it", func() error { tier.Resize(8, 4); return nil }, want{28, 32, 2, 2, 16, 24}},
				{"W0", func() error { tier.Untrack(4); return nil }, want{24, 32, 1, 2, 16, 24}},
				{"load 1", func() error { _, err := tier.Load(hs[1]); return err }, want{40, 40, 2, 2, 0, 24}},
				{"B1", func() error { tier.Untrack(16); return nil }, want{24, 40, 1, 2, 0, 24}},
				{"B2", func() error { tier.Untrack(24); return nil }, want{0, 40, 0, 2, 0, 24}},
			}
			for _, s := range steps {
				if err := s.do(); err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				st := tier.Stats()
				got := want{st.ResidentBytes, st.PeakResidentBytes, st.ResidentChunks, st.PeakResidentChunks, st.OffloadedBytes, st.MaxChunkBytes}
				if got != s.want {
					t.Errorf("after %s: got %+v, want %+v", s.name, got, s.want)
				}
			}
			if tier.ResidentBytes() != 0 || tier.PeakResidentBytes() != 40 || tier.OffloadedBytes() != 0 {
				t.Errorf("accessors: %d %d %d", tier.ResidentBytes(), tier.PeakResidentBytes(), tier.OffloadedBytes())
			}
			if st := tier.Stats(); st.PeakOffloadedBytes != 24 || st.Offloads != 2 || st.Loads != 2 || st.BytesOut != 24 || st.BytesIn != 24 {
				t.Errorf("totals: %+v", st)
			}
		})
	}
}

// TestSizeOf counts distinct tensors once and skips nil entries.
func TestSizeOf(t *testing.T) {
	a := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(make([]float32, 6)))
	b := tensor.New(tensor.WithShape(5), tensor.WithBacking(make([]float64, 5)))
	for _, c := range []struct {
		ts   []*tensor.Dense
		want int64
	}{
		{nil, 0},
		{[]*tensor.Dense{nil}, 0},
		{[]*tensor.Dense{a}, 24},
		{[]*tensor.Dense{a, b, a, nil}, 64},
	} {
		if got := swap.SizeOf(c.ts); got != c.want {
			t.Errorf("SizeOf of %d entries = %d, want %d", len(c.ts), got, c.want)
		}
	}
}
