package checkpoint_test

import (
	"fmt"
	"log"
	"os"

	"github.com/ppgen/ppgen/runtime/checkpoint"
)

// Save one rank's layers under a one-rank layout, then read a layer back
// as a rank of any other layout would.
func Example() {
	dir, err := os.MkdirTemp("", "ckpt")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	layout := checkpoint.Layout{Schedule: "1f1b", Ranks: 1, DP: 1, Stages: 1, RankOf: []int{0}, Layers: [][2]int{{0, 2}}}
	shard := &checkpoint.Shard{Params: []checkpoint.Param{
		{Layer: 0, Name: "0.weight", Value: checkpoint.Tensor{Shape: []int{2}, F32: []float32{1, 2}},
			State: []checkpoint.NamedTensor{{Name: "m", Tensor: checkpoint.Tensor{Shape: []int{2}, F32: []float32{0.1, 0.2}}}}, Scalars: map[string]float64{"t": 1}},
		{Layer: 1, Name: "0.weight", Value: checkpoint.Tensor{Shape: []int{2}, F32: []float32{3, 4}}},
	}}
	if err := checkpoint.Save(dir, shard, checkpoint.SaveOptions{Step: 10, Layout: layout}); err != nil {
		log.Fatal(err)
	}
	c, err := checkpoint.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	ps, err := c.Layers([]int{0}, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Manifest.Step, c.Manifest.Layout, ps[0].Name, ps[0].Value.F32, ps[0].State[0].Tensor.F32, ps[0].Scalars["t"])
	// Output: 10 1f1b P=1 DP=1 stages [0,2) 0.weight [1 2] [0.1 0.2] 1
}
