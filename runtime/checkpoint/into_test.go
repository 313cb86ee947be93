package checkpoint

import (
	"strings"
	"testing"
)

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
