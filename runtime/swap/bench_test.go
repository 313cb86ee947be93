package swap_test

import (
	"fmt"
	"testing"

	"gorgonia.org/tensor"
)

// BenchmarkTier measures an offload and its load (round trip) of one
// float32 tensor per tier and size; MB/s counts the tensor's bytes once per
// round trip.
func BenchmarkTier(b *testing.B) {
	for _, tc := range tiers {
		for _, mib := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/%dMiB", tc.name, mib), func(b *testing.B) {
				tier := tc.make(b)
				defer tier.Close()
				n := mib << 20 / 4
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(i)
				}
				x := tensor.New(tensor.WithShape(n), tensor.WithBacking(v))
				ts := []*tensor.Dense{x}
				b.SetBytes(int64(mib) << 20)
				for b.Loop() {
					h, err := tier.Offload(ts, "bench")
					if err != nil {
						b.Fatal(err)
					}
					if _, err := tier.Load(h); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
