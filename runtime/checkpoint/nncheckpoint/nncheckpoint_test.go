package nncheckpoint

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/transport"
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

// TestSaveOverComm saves a 2 × 2 layout from four goroutines, each a rank
// of an in-process world whose barrier is CommBarrier, twice; every layer
// comes back.
func TestSaveOverComm(t *testing.T) {
	const world = 4
	l := checkpoint.Layout{Schedule: "1f1b", Ranks: 2, DP: 2, Stages: 2, RankOf: []int{0, 1}, Layers: [][2]int{{0, 1}, {1, 2}}}
	dir := t.TempDir()
	trs := transport.NewInProc(world)
	for step := int64(1); step <= 2; step++ {
		errs := make([]error, world)
		var wg sync.WaitGroup
		for r := range world {
			comm, err := collective.New(trs[r], abi.ActChannel)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				pp := r / l.DP
				lin, err := nn.NewLinear(2, 2, tensor.Float64, rand.New(rand.NewPCG(uint64(pp), uint64(step))))
				if err != nil {
					errs[r] = err
					return
				}
				ps, err := FromNN(pp, lin.Params())
				if err != nil {
					errs[r] = err
					return
				}
				errs[r] = checkpoint.Save(dir, &checkpoint.Shard{Params: ps}, checkpoint.SaveOptions{Rank: r, Step: step, Layout: l, Barrier: CommBarrier(comm)})
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("step %d rank %d: %v", step, r, err)
			}
		}
		c, err := checkpoint.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if c.Manifest.Step != step || c.Manifest.Generation != int(step) {
			t.Fatalf("manifest step %d generation %d, want %d", c.Manifest.Step, c.Manifest.Generation, step)
		}
		got, err := c.Layers([]int{0, 1}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 {
			t.Fatalf("%d parameters, want 4", len(got))
		}
	}
}
