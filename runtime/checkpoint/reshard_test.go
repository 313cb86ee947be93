package checkpoint

import (
	"fmt"
	"testing"
)

// TestReshard saves a model under one layout and reads each rank's layers
// under another: the tensors are the saved ones, bit for bit.
func TestReshard(t *testing.T) {
	const layers = 8
	for _, tc := range []struct {
		name     string
		from, to Layout
	}{
		{"P=4 to P=2", plainLayout([]int{0, 2, 4, 6, 8}, 1, false), plainLayout([]int{0, 4, 8}, 1, false)},
		{"P=4 DP=2 to P=2 uneven", plainLayout([]int{0, 2, 4, 6, 8}, 2, false), plainLayout([]int{0, 3, 8}, 1, false)},
		{"P=2 to P=4 DP=3", plainLayout([]int{0, 4, 8}, 1, false), plainLayout([]int{0, 1, 2, 5, 8}, 3, false)},
		{"FSDP DP=2 to P=4", plainLayout([]int{0, 4, 8}, 2, true), plainLayout([]int{0, 2, 4, 6, 8}, 1, false)},
		{"P=4 to FSDP DP=3", plainLayout([]int{0, 2, 4, 6, 8}, 1, false), plainLayout([]int{0, 5, 8}, 3, true)},
		{"FSDP DP=2 to FSDP DP=4", plainLayout([]int{0, 4, 8}, 2, true), plainLayout([]int{0, 6, 8}, 4, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := model(layers, 5)
			dir := t.TempDir()
			saveAll(t, dir, tc.from, 7, shardsOf(t, ps, tc.from))
			c, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			// Every rank of the new layout reads its layers and builds its
			// shard; the new checkpoint is what saving ps under tc.to gives.
			to := tc.to
			dp := max(to.DP, 1)
			shards := make([]*Shard, to.World())
			for pp := range to.Ranks {
				layers := to.LayersOf(pp)
				for d := range dp {
					got, err := c.Layers(layers, d)
					if err != nil {
						t.Fatal(err)
					}
					equalParams(t, got, ofLayers(ps, layers[0], layers[len(layers)-1]+1))
					s := &Shard{}
					if to.FSDP {
						f, err := SplitFlat(fmt.Sprintf("stage %d", pp), got, d, dp)
						if err != nil {
							t.Fatal(err)
						}
						s.Flats = []Flat{f}
					} else {
						s.Params = got
					}
					shards[pp*dp+d] = s
				}
			}
			dir2 := t.TempDir()
			saveAll(t, dir2, to, 7, shards)
			c2, err := Open(dir2)
			if err != nil {
				t.Fatal(err)
			}
			all := make([]int, layers)
			for i := range all {
				all[i] = i
			}
			got, err := c2.Layers(all, 0)
			if err != nil {
				t.Fatal(err)
			}
			equalParams(t, got, ps)
		})
	}
}

func TestSplitJoinFlat(t *testing.T) {
	ps := model(3, 9)
	for of := 1; of <= 7; of++ {
		var chunks []*Flat
		for i := range of {
			f, err := SplitFlat("g", ps, i, of)
			if err != nil {
				t.Fatal(err)
			}
			chunks = append([]*Flat{&f}, chunks...) // any order
		}
		got, err := JoinFlat(chunks)
		if err != nil {
			t.Fatal(err)
		}
		equalParams(t, got, ps)
		if _, err := JoinFlat(chunks[1:]); of > 1 && err == nil {
			t.Fatalf("of=%d: joined with a chunk missing", of)
		}
	}
}
