package pipe

import (
	"fmt"
	"testing"
)

// TestReadsData: the ranks that read micro-batches, for one pipeline, V
// stages per rank, shipped labels, two model copies and mpipe's owners.
func TestReadsData(t *testing.T) {
	for _, c := range []struct {
		name string
		sp   Spec
		want []bool // by rank
	}{
		{"1f1b", Spec{Ranks: 4, Stages: 4, RankOf: []int{0, 1, 2, 3}}, []bool{true, false, false, true}},
		{"zbv", Spec{Ranks: 2, Stages: 4, RankOf: []int{0, 1, 1, 0}}, []bool{true, false}},
		{"interleaved", Spec{Ranks: 2, Stages: 4, RankOf: []int{0, 1, 0, 1}}, []bool{true, true}},
		{"ship labels", Spec{Ranks: 4, Stages: 4, RankOf: []int{0, 1, 2, 3}, ShipLabels: true}, []bool{true, false, false, false}},
		{"ship labels, route on one rank", Spec{Ranks: 2, Stages: 4, RankOf: []int{0, 1, 1, 0}, ShipLabels: true}, []bool{true, false}},
		{"two copies", Spec{Ranks: 4, Stages: 8, RankOf: []int{0, 1, 2, 3, 3, 2, 1, 0}, Copies: 2}, []bool{true, false, false, true}},
		{"mpipe owners", Spec{Ranks: 4, Stages: 4, RankOf: []int{0, 1, 2, 3}, Owned: 3}, []bool{true, true, true, true}},
		{"mpipe, fewer owners", Spec{Ranks: 4, Stages: 4, RankOf: []int{0, 1, 2, 3}, Owned: 2}, []bool{true, true, false, true}},
	} {
		var got []bool
		for r := range c.sp.Ranks {
			got = append(got, c.sp.ReadsData(r))
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: ReadsData by rank %v, want %v", c.name, got, c.want)
		}
	}
}
