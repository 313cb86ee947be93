package checkpoint

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"gorgonia.org/tensor"

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
			l := Layout{Ranks: 1, DP: 1}
			if err := Save(dir, &Shard{Params: ps}, SaveOptions{Layout: l}); err != nil {
				t.Fatal(err)
			}
			c, err := Open(dir)
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
				if !sameTensor(x, y) {
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

func TestLayersInto(t *testing.T) {
	ps := model(4, 3)
	for _, fsdp := range []bool{false, true} {
		dir := t.TempDir()
		l := plainLayout([]int{0, 2, 4}, 2, fsdp)
		saveAll(t, dir, l, 1, shardsOf(t, ps, l))
		c, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		dst := map[string]Tensor{}
		into := func(layer int, name, state string) Tensor {
			k := string(rune('0'+layer)) + name + "/" + state
			if _, ok := dst[k]; !ok {
				n := 12
				if strings.HasSuffix(name, "bias") {
					n = 4
				}
				dst[k] = Tensor{F64: make([]float64, n)}
			}
			return dst[k]
		}
		got, err := c.LayersInto([]int{0, 1, 2, 3}, 0, into)
		if err != nil {
			t.Fatal(err)
		}
		equalParams(t, got, ps)
		for _, p := range got {
			if &p.Value.F64[0] != &into(p.Layer, p.Name, "").F64[0] || &p.State[1].Tensor.F64[0] != &into(p.Layer, p.Name, "v").F64[0] {
				t.Fatalf("fsdp %v: layer %d %q not read into the given memory", fsdp, p.Layer, p.Name)
			}
		}
	}
}
