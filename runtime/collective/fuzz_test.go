package collective_test

import (
	"errors"
	"math"
	"testing"

	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/transport"
)

// FuzzAllReduce: for any group size (1..6) and length (1..300), all-reduce
// and reduce-scatter on the in-process transport give, bit for bit, the
// member-order sum of the package doc, on every member.
func FuzzAllReduce(f *testing.F) {
	f.Add(uint8(2), uint16(7), uint64(1))
	f.Add(uint8(3), uint16(1), uint64(2))
	f.Add(uint8(5), uint16(299), uint64(3))
	f.Fuzz(func(t *testing.T, nb uint8, lb uint16, seed uint64) {
		n, L := 1+int(nb)%6, 1+int(lb)%300
		xs := inputs(n, L, seed)
		want := refSum(xs, L)
		k := collective.ChunkLen(L, n)
		trs := transport.NewInProc(n)
		got := make([][]float64, n)
		rs := make([][]float64, n)
		errs := run(trs, func(c *collective.Comm) error {
			x := vec64(xs[c.Rank()])
			if err := c.AllReduce(x); err != nil {
				return err
			}
			got[c.Rank()] = x.Float64s()
			s, err := c.ReduceScatter(vec64(xs[c.Rank()]))
			if err != nil {
				return err
			}
			rs[c.Rank()] = s.Float64s()
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		for r := range n {
			for i := range L {
				if math.Float64bits(got[r][i]) != math.Float64bits(want[i]) {
					t.Fatalf("n=%d L=%d: all-reduce member %d element %d = %v, want %v", n, L, r, i, got[r][i], want[i])
				}
			}
			for i := range k {
				w := 0.0
				if j := r*k + i; j < L {
					w = want[j]
				}
				if math.Float64bits(rs[r][i]) != math.Float64bits(w) {
					t.Fatalf("n=%d L=%d: reduce-scatter member %d element %d = %v, want %v", n, L, r, i, rs[r][i], w)
				}
			}
		}
	})
}
