package passes

import (
	"math"
	"slices"
	"testing"
)

// keysOf returns transfer keys from (time, tie) pairs.
func keysOf(kv ...[2]float64) []transferKey {
	keys := make([]transferKey, len(kv))
	for i, x := range kv {
		keys[i] = transferKey{x[0], uint64(x[1])}
	}
	return keys
}

func TestMergeByKey(t *testing.T) {
	// Transfers 0..7 by key: equal times are ordered by their ties.
	keys := keysOf([2]float64{1, 0}, [2]float64{2, 5}, [2]float64{2, 3}, [2]float64{3, 0},
		[2]float64{0.5, 9}, [2]float64{2, 4}, [2]float64{7, 0}, [2]float64{3, 1})
	for _, c := range []struct {
		name string
		a, b []int32
		want []int32
	}{
		{"both empty", nil, nil, []int32{}},
		{"a empty", nil, []int32{4, 0}, []int32{4, 0}},
		{"b empty", []int32{0, 3}, nil, []int32{0, 3}},
		{"interleaved", []int32{0, 2, 3}, []int32{4, 5, 1, 7, 6}, []int32{4, 0, 2, 5, 1, 3, 7, 6}},
		{"ties by tie", []int32{2, 1}, []int32{5}, []int32{2, 5, 1}},
		{"b all first", []int32{3, 6}, []int32{4, 0}, []int32{4, 0, 3, 6}},
	} {
		// Apart: dst its own memory.
		dst := make([]int32, len(c.a)+len(c.b))
		if got := mergeByKey(dst, c.a, c.b, keys); !slices.Equal(got, c.want) {
			t.Errorf("%s: mergeByKey = %v, want %v", c.name, got, c.want)
		}
		// In place, as insertCommTimed merges: b lies in dst right after
		// len(a) elements (what dst held there before is overwritten).
		buf := make([]int32, len(c.a)+len(c.b))
		for i := range c.a {
			buf[i] = -1
		}
		copy(buf[len(c.a):], c.b)
		if got := mergeByKey(buf, c.a, buf[len(c.a):], keys); !slices.Equal(got, c.want) {
			t.Errorf("%s: mergeByKey in place = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestKeyRank(t *testing.T) {
	for _, c := range []struct {
		name string
		j    []int32   // the transfers' producer steps
		tie  []uint64  // and ties
		e    []float64 // the rank's end times
		want bool
	}{
		{"none", nil, nil, []float64{1}, true},
		{"one", []int32{0}, []uint64{5}, []float64{1}, true},
		{"by time", []int32{0, 1, 3}, []uint64{9, 1, 0}, []float64{1, 2, 3, 4}, true},
		{"one step, ties in order", []int32{1, 1}, []uint64{3, 4}, []float64{1, 2}, true},
		{"one step, ties out of order", []int32{1, 1}, []uint64{4, 3}, []float64{1, 2}, false},
		{"times out of order", []int32{1, 0}, []uint64{0, 1}, []float64{1, 2}, false},
		{"equal keys", []int32{0, 0}, []uint64{2, 2}, []float64{1}, false},
	} {
		ts := make([]transfer, len(c.j))
		for i := range ts {
			ts[i].j, ts[i].tie = c.j[i], c.tie[i]
		}
		keys := make([]transferKey, len(ts))
		if got := keyRank(keys, ts, c.e); got != c.want {
			t.Errorf("%s: keyRank = %v, want %v", c.name, got, c.want)
		}
		for i := range ts {
			if want := (transferKey{c.e[c.j[i]], c.tie[i]}); keys[i] != want {
				t.Errorf("%s: keys[%d] = %v, want %v", c.name, i, keys[i], want)
			}
		}
	}
}

func TestSlideRecvs(t *testing.T) {
	inf := math.Inf(1)
	e := []float64{1, 2, 3, 4, 5, 6}
	for _, c := range []struct {
		name     string
		list     []placed
		sendNext []float64
		want     []int32 // the positions after the slide
		ok       bool
	}{
		{"to its consumer", []placed{{at: 1, cons: 4, recv: true}}, []float64{inf}, []int32{4}, true},
		{"to its send's next op", []placed{{at: 1, cons: 5, recv: true}}, []float64{3}, []int32{3}, true},
		{"to its rank's next op's time", []placed{{at: 0, cons: 5, recv: true}, {t: 2, at: 5}}, []float64{inf, inf}, []int32{2, 5}, true},
		{"to its rank's next op's position", []placed{{at: 0, cons: 5, recv: true}, {t: 9, at: 3}}, []float64{inf, inf}, []int32{3, 3}, true},
		{"a send stays", []placed{{at: 2, x: 0}, {at: 2, cons: 5, x: 1, recv: true}}, []float64{inf, inf}, []int32{2, 5}, true},
		{"out of order", []placed{{at: 3}, {at: 2}}, []float64{inf, inf}, nil, false},
	} {
		for i := range c.list {
			c.list[i].x = int32(i)
		}
		ok := slideRecvs(c.list, e, c.sendNext)
		if ok != c.ok {
			t.Errorf("%s: slideRecvs = %v, want %v", c.name, ok, c.ok)
			continue
		}
		for i, want := range c.want {
			if c.list[i].at != want {
				t.Errorf("%s: op %d at %d, want %d", c.name, i, c.list[i].at, want)
			}
		}
	}
}
