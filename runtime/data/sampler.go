package data

import (
	"fmt"
	"math/bits"
	"sort"
)

// Config sizes a step: Micro micro-batches per replica, each of Batch
// windows of SeqLen+1 tokens (the input is a window's first SeqLen, the
// target its last SeqLen), on each of Replicas data-parallel replicas.
type Config struct {
	Seed     uint64
	SeqLen   int
	Batch    int
	Micro    int
	Replicas int
}

// Window is a run of SeqLen+1 tokens: Shard indexes the sampler's shards.
type Window struct {
	Shard  int
	Offset int64
}

// Sampler picks each step's windows over a set of shards.
//
// Each shard is cut into slots of L = SeqLen+1 tokens, after a shift in
// [0, L) drawn per step: shard i holds floor((count_i − SeqLen) / L)
// slots, numbered across the shards in order. Step t keys a pseudo-random
// permutation π_t of the slot numbers by (Seed, t), and the global
// sequence j of the step (j = ((replica·Micro + micro)·Batch + b)) reads
// slot π_t(j). So:
//
//   - the windows of one step are disjoint, across micro-batches and
//     replicas (distinct slots of one shift never overlap);
//   - a window is a pure function of (Seed, t, j) and the shards: the same
//     on every rank, after a restart at step t, and whatever ran before;
//   - with the same global batch (Replicas·Micro·Batch sequences), a change
//     of Replicas and Micro keeps every step's windows in the same global
//     order: only how they are split over replicas and micro-batches
//     changes.
//
// Across steps, windows are drawn afresh (with replacement).
type Sampler struct {
	cfg    Config
	shards []*Shard
	ids    []ShardID
	cum    []int64 // cum[i]: slots of shards 0..i-1; cum[len] = total
}

// NewSampler returns a sampler over shards (in this order: the order is
// part of the windows' identity) for cfg.
func NewSampler(shards []*Shard, cfg Config) (*Sampler, error) {
	switch {
	case len(shards) == 0:
		return nil, fmt.Errorf("data: a sampler needs at least one shard")
	case cfg.SeqLen < 1 || cfg.SeqLen > 1<<24:
		return nil, fmt.Errorf("data: sequence length %d; want 1..%d", cfg.SeqLen, 1<<24)
	case cfg.Batch < 1 || cfg.Micro < 1 || cfg.Replicas < 1:
		return nil, fmt.Errorf("data: %d windows per micro-batch, %d micro-batches, %d replicas; want each at least 1", cfg.Batch, cfg.Micro, cfg.Replicas)
	}
	L := int64(cfg.SeqLen) + 1
	s := &Sampler{cfg: cfg, shards: shards, cum: make([]int64, len(shards)+1)}
	for i, sh := range shards {
		n := int64(0)
		if sh.Len() > int64(cfg.SeqLen) {
			n = (sh.Len() - int64(cfg.SeqLen)) / L
		}
		s.cum[i+1] = s.cum[i] + n
		s.ids = append(s.ids, sh.ID())
	}
	total := s.cum[len(shards)]
	need, ok := perStep(cfg)
	if !ok || need > total {
		return nil, fmt.Errorf("data: the shards hold %d disjoint windows of %d tokens; a step needs %d·%d·%d (replicas·micro·batch)", total, L, cfg.Replicas, cfg.Micro, cfg.Batch)
	}
	return s, nil
}

// perStep returns Replicas·Micro·Batch, and false when it overflows.
func perStep(c Config) (int64, bool) {
	hi, n := bits.Mul64(uint64(c.Replicas), uint64(c.Micro))
	if hi != 0 {
		return 0, false
	}
	hi, n = bits.Mul64(n, uint64(c.Batch))
	return int64(n), hi == 0 && n < 1<<62
}

// Config returns the sampler's configuration.
func (s *Sampler) Config() Config { return s.cfg }

// Shards returns the shards, in the sampler's order.
func (s *Sampler) Shards() []*Shard { return s.shards }

// Windows appends to dst the Batch windows of micro-batch micro of replica
// replica at step step.
func (s *Sampler) Windows(dst []Window, step int64, micro, replica int) ([]Window, error) {
	c := s.cfg
	if step < 0 || micro < 0 || micro >= c.Micro || replica < 0 || replica >= c.Replicas {
		return dst, fmt.Errorf("data: step %d, micro-batch %d, replica %d; want step ≥ 0, micro-batch < %d, replica < %d", step, micro, replica, c.Micro, c.Replicas)
	}
	key := mix(c.Seed ^ mix(uint64(step)+0x9e3779b97f4a7c15))
	L := int64(c.SeqLen) + 1
	shift := int64(mix(key^0x5ca1ab1e) % uint64(L))
	p := newPermutation(uint64(s.cum[len(s.cum)-1]), key)
	first := (int64(replica)*int64(c.Micro) + int64(micro)) * int64(c.Batch)
	for b := range int64(c.Batch) {
		slot := int64(p.at(uint64(first + b)))
		i := sort.Search(len(s.shards), func(i int) bool { return s.cum[i+1] > slot })
		dst = append(dst, Window{Shard: i, Offset: shift + (slot-s.cum[i])*L})
	}
	return dst, nil
}

// Step is one replica's tokens for one step: Tokens[m] holds micro-batch
// m's Batch windows of SeqLen+1 tokens back to back, Windows[m] where they
// were read.
type Step struct {
	Step    int64
	Windows [][]Window
	Tokens  [][]uint32
}

// Read reads replica replica's windows of step step.
func (s *Sampler) Read(step int64, replica int) (*Step, error) {
	c := s.cfg
	L := c.SeqLen + 1
	st := &Step{Step: step, Windows: make([][]Window, c.Micro), Tokens: make([][]uint32, c.Micro)}
	all, wins := make([]uint32, c.Micro*c.Batch*L), make([]Window, 0, c.Micro*c.Batch) // one allocation each per step
	for m := range c.Micro {
		ws, err := s.Windows(wins[len(wins):len(wins):len(wins)+c.Batch], step, m, replica)
		if err != nil {
			return nil, err
		}
		wins = wins[:len(wins)+c.Batch]
		toks := all[m*c.Batch*L : (m+1)*c.Batch*L : (m+1)*c.Batch*L]
		for b, w := range ws {
			if err := s.shards[w.Shard].ReadAt(toks[b*L:(b+1)*L], w.Offset); err != nil {
				return nil, fmt.Errorf("data: step %d, micro-batch %d, replica %d: %w", step, m, replica, err)
			}
		}
		st.Windows[m], st.Tokens[m] = ws, toks
	}
	return st, nil
}

// mix is SplitMix64's finalizer: a bijection of uint64 that scrambles
// every bit.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// permutation is a keyed pseudo-random bijection of [0, n): a 4-round
// balanced Feistel network on 2h bits (4^h ≥ n), cycle-walked into
// [0, n) (each walk averages under 4 rounds of the network, since 4^h <
// 4n).
type permutation struct {
	n, mask uint64
	h       uint
	keys    [4]uint64
}

func newPermutation(n, key uint64) permutation {
	h := uint(1)
	for h < 32 && uint64(1)<<(2*h) < n {
		h++
	}
	p := permutation{n: n, h: h, mask: 1<<h - 1}
	for i := range p.keys {
		p.keys[i] = mix(key + uint64(i+1)*0x9e3779b97f4a7c15)
	}
	return p
}

func (p permutation) at(x uint64) uint64 {
	for {
		l, r := x>>p.h, x&p.mask
		for _, k := range p.keys {
			l, r = r, l^(mix(r^k)&p.mask)
		}
		x = l<<p.h | r
		if x < p.n {
			return x
		}
	}
}

// Position is a sampler's state for a checkpoint: the seed, the next step
// to run, the sequence length and the shards' identities in order. A
// checkpoint stores it as JSON (its fields are tagged) beside the step;
// [Sampler.Resume] checks it against the sampler of the resumed run.
type Position struct {
	Seed   uint64    `json:"seed"`
	Step   int64     `json:"step"`
	SeqLen int       `json:"seq_len"`
	Shards []ShardID `json:"shards"`
}

// Position returns the state after steps 0..step-1 ran: step is the next.
func (s *Sampler) Position(step int64) Position {
	return Position{Seed: s.cfg.Seed, Step: step, SeqLen: s.cfg.SeqLen, Shards: append([]ShardID(nil), s.ids...)}
}

// Resume checks that p was taken from a sampler that draws the same
// windows as s (seed, sequence length, shards: names, counts and
// checksums, in order) and returns the step to continue at. Replicas,
// Micro and Batch may differ (a resume under another -dp); with the same
// global batch the windows are the same.
func (s *Sampler) Resume(p Position) (int64, error) {
	switch {
	case p.Step < 0:
		return 0, fmt.Errorf("data: position at step %d", p.Step)
	case p.Seed != s.cfg.Seed:
		return 0, fmt.Errorf("data: position of seed %d, the sampler's is %d", p.Seed, s.cfg.Seed)
	case p.SeqLen != s.cfg.SeqLen:
		return 0, fmt.Errorf("data: position of sequence length %d, the sampler's is %d", p.SeqLen, s.cfg.SeqLen)
	case len(p.Shards) != len(s.ids):
		return 0, fmt.Errorf("data: position over %d shards, the sampler has %d", len(p.Shards), len(s.ids))
	}
	for i, id := range p.Shards {
		if id != s.ids[i] {
			return 0, fmt.Errorf("data: position's shard %d is %s (%d tokens, crc32c %08x); the sampler's is %s (%d tokens, crc32c %08x)",
				i, id.Name, id.Tokens, id.CRC32C, s.ids[i].Name, s.ids[i].Tokens, s.ids[i].CRC32C)
		}
	}
	return p.Step, nil
}
