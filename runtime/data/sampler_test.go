package data

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestPermutation: the keyed permutation is a bijection of [0, n).
func TestPermutation(t *testing.T) {
	for n := uint64(1); n <= 300; n++ {
		for key := range uint64(3) {
			p := newPermutation(n, key)
			seen := make([]bool, n)
			for x := range n {
				y := p.at(x)
				if y >= n || seen[y] {
					t.Fatalf("n %d key %d: π(%d) = %d, out of range or repeated", n, key, x, y)
				}
				seen[y] = true
			}
		}
	}
}

func testShards(t *testing.T, counts ...int) []*Shard {
	dir := t.TempDir()
	var out []*Shard
	for i, n := range counts {
		out = append(out, writeShard(t, dir, fmt.Sprintf("s%d.tok", i), Uint16, 0, ramp(n, 1<<16)))
	}
	return out
}

// windows returns every window of step, in global order (replica, micro,
// batch).
func allWindows(t *testing.T, s *Sampler, step int64) []Window {
	t.Helper()
	var out []Window
	c := s.Config()
	for r := range c.Replicas {
		for m := range c.Micro {
			var err error
			if out, err = s.Windows(out, step, m, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// TestSamplerWindows: within a step the windows lie inside their shards
// and do not overlap; the same (seed, step) gives the same windows on a
// new sampler, in any order of steps; another seed or step gives others;
// a replica/micro split of the same global batch gives the same windows
// in the same global order.
func TestSamplerWindows(t *testing.T) {
	shards := testShards(t, 1000, 37, 5000, 300)
	cfg := Config{Seed: 7, SeqLen: 15, Batch: 3, Micro: 4, Replicas: 2}
	s, err := NewSampler(shards, cfg)
	if err != nil {
		t.Fatal(err)
	}
	L := int64(cfg.SeqLen + 1)
	first := map[int64][]Window{}
	for step := int64(0); step < 50; step++ {
		ws := allWindows(t, s, step)
		if len(ws) != 24 {
			t.Fatalf("step %d: %d windows", step, len(ws))
		}
		used := map[[2]int64]bool{}
		for _, w := range ws {
			if w.Offset < 0 || w.Offset+L > shards[w.Shard].Len() {
				t.Fatalf("step %d: window %+v outside shard of %d tokens", step, w, shards[w.Shard].Len())
			}
			for k := w.Offset; k < w.Offset+L; k++ {
				if used[[2]int64{int64(w.Shard), k}] {
					t.Fatalf("step %d: windows overlap at shard %d token %d", step, w.Shard, k)
				}
				used[[2]int64{int64(w.Shard), k}] = true
			}
		}
		first[step] = ws
	}
	if fmt.Sprint(first[3]) == fmt.Sprint(first[4]) {
		t.Error("steps 3 and 4 draw the same windows")
	}
	again, _ := NewSampler(shards, cfg)
	for _, step := range []int64{49, 3, 0, 17} { // a resumed run, steps in any order
		if got := allWindows(t, again, step); fmt.Sprint(got) != fmt.Sprint(first[step]) {
			t.Fatalf("step %d: a new sampler draws %v, want %v", step, got, first[step])
		}
	}
	other := cfg
	other.Seed = 8
	o, _ := NewSampler(shards, other)
	if fmt.Sprint(allWindows(t, o, 3)) == fmt.Sprint(first[3]) {
		t.Error("seeds 7 and 8 draw the same windows")
	}
	for _, split := range [][2]int{{1, 8}, {4, 2}, {8, 1}} {
		c := cfg
		c.Replicas, c.Micro = split[0], split[1]
		r, err := NewSampler(shards, c)
		if err != nil {
			t.Fatal(err)
		}
		if got := allWindows(t, r, 5); fmt.Sprint(got) != fmt.Sprint(first[5]) {
			t.Errorf("replicas %d × micro %d: the global batch's windows differ", split[0], split[1])
		}
	}
}

// TestSamplerRefusals: bad configurations, too few windows and bad
// arguments are refused.
func TestSamplerRefusals(t *testing.T) {
	shards := testShards(t, 100)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{SeqLen: 0, Batch: 1, Micro: 1, Replicas: 1}, "sequence length 0"},
		{Config{SeqLen: 9, Batch: 0, Micro: 1, Replicas: 1}, "want each at least 1"},
		{Config{SeqLen: 9, Batch: 5, Micro: 1, Replicas: 2}, "the shards hold 9 disjoint windows of 10 tokens; a step needs 2·1·5"},
		{Config{SeqLen: 9, Batch: 1 << 40, Micro: 1 << 40, Replicas: 1 << 40}, "a step needs"},
		{Config{SeqLen: 200, Batch: 1, Micro: 1, Replicas: 1}, "the shards hold 0 disjoint windows"},
	} {
		if _, err := NewSampler(shards, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if _, err := NewSampler(nil, Config{SeqLen: 1, Batch: 1, Micro: 1, Replicas: 1}); err == nil {
		t.Error("no shards accepted")
	}
	s, err := NewSampler(shards, Config{SeqLen: 9, Batch: 2, Micro: 2, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range [][3]int64{{-1, 0, 0}, {0, 2, 0}, {0, 0, 2}, {0, -1, 0}} {
		if _, err := s.Windows(nil, a[0], int(a[1]), int(a[2])); err == nil {
			t.Errorf("step %d micro %d replica %d accepted", a[0], a[1], a[2])
		}
	}
}

// TestPosition: a Position survives JSON and resumes the sampler it came
// from; a changed seed, sequence length or shard is refused.
func TestPosition(t *testing.T) {
	shards := testShards(t, 1000, 500)
	cfg := Config{Seed: 3, SeqLen: 9, Batch: 2, Micro: 2, Replicas: 2}
	s, _ := NewSampler(shards, cfg)
	b, err := json.Marshal(s.Position(42))
	if err != nil {
		t.Fatal(err)
	}
	var p Position
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	dp1 := cfg
	dp1.Replicas, dp1.Micro = 1, 4
	r, _ := NewSampler(shards, dp1)
	if step, err := r.Resume(p); err != nil || step != 42 {
		t.Fatalf("Resume: %d, %v", step, err)
	}
	for _, c := range []struct {
		edit func(*Position)
		want string
	}{
		{func(p *Position) { p.Seed = 4 }, "seed 4"},
		{func(p *Position) { p.SeqLen = 10 }, "sequence length 10"},
		{func(p *Position) { p.Step = -1 }, "step -1"},
		{func(p *Position) { p.Shards = p.Shards[:1] }, "over 1 shards"},
		{func(p *Position) { p.Shards[1].CRC32C++ }, "shard 1 is s1.tok"},
		{func(p *Position) { p.Shards[0], p.Shards[1] = p.Shards[1], p.Shards[0] }, "shard 0 is s1.tok"},
	} {
		q := s.Position(42)
		c.edit(&q)
		if _, err := s.Resume(q); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}
