package nncheckpoint

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/nn"
)

func TestNNRoundTrip(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		t.Run(dt.String(), func(t *testing.T) {
			a, err := nn.NewLinear(3, 2, dt, rand.New(rand.NewPCG(1, 1)))
			if err != nil {
				t.Fatal(err)
			}
			b, err := nn.NewLinear(3, 2, dt, rand.New(rand.NewPCG(2, 2)))
			if err != nil {
				t.Fatal(err)
			}
			ps, err := FromNN(4, a.Params())
			if err != nil {
				t.Fatal(err)
			}
			if got := []string{ps[0].Name, ps[1].Name}; !slices.Equal(got, []string{"0.weight", "1.bias"}) {
				t.Fatalf("names %v", got)
			}
			dir := t.TempDir()
			l := checkpoint.Layout{Ranks: 1, DP: 1}
			if err := checkpoint.Save(dir, &checkpoint.Shard{Params: ps}, checkpoint.SaveOptions{Layout: l}); err != nil {
				t.Fatal(err)
			}
			c, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Layers([]int{4}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := ToNN(4, b.Params(), got); err != nil {
				t.Fatal(err)
			}
			for i := range a.Params() {
				x, _ := FromDense(a.Params()[i].Value)
				y, _ := FromDense(b.Params()[i].Value)
				if !slices.Equal(x.Shape, y.Shape) || !slices.Equal(x.F32, y.F32) || !slices.Equal(x.F64, y.F64) {
					t.Fatalf("parameter %d differs after ToNN", i)
				}
			}
			// A model of another shape is refused.
			wrong, _ := nn.NewLinear(3, 5, dt, rand.New(rand.NewPCG(3, 3)))
			if err := ToNN(4, wrong.Params(), got); err == nil || !strings.Contains(err.Error(), "saved") {
				t.Fatalf("ToNN into another shape: %v", err)
			}
			if err := ToNN(5, b.Params(), got); err == nil || !strings.Contains(err.Error(), "no parameter") {
				t.Fatalf("ToNN of a layer not read: %v", err)
			}
		})
	}
}
