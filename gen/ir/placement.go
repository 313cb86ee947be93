package ir

import (
	"fmt"
	"strconv"
	"strings"
)

// Placement maps each virtual stage to the rank that holds it.
type Placement struct {
	// Name is "loop", "v" or "table".
	Name string
	// RankOf[s] is the rank holding stage s.
	RankOf []int
	// NumRanks is the number of ranks (some may hold no stage only in a table).
	NumRanks int
}

// Loop places stage s on rank s mod ranks, for ranks·virtual stages.
func Loop(ranks, virtual int) Placement {
	p := Placement{Name: "loop", NumRanks: ranks, RankOf: make([]int, ranks*virtual)}
	for s := range p.RankOf {
		p.RankOf[s] = s % ranks
	}
	return p
}

// VShape places stages r and 2·ranks-1-r on rank r (two chunks per rank, the
// turn of the V on the last rank).
func VShape(ranks int) Placement {
	p := Placement{Name: "v", NumRanks: ranks, RankOf: make([]int, 2*ranks)}
	for r := 0; r < ranks; r++ {
		p.RankOf[r] = r
		p.RankOf[2*ranks-1-r] = r
	}
	return p
}

// Zigzag places the ranks·virtual stages in legs of ranks stages that run
// down the ranks and back up in turn: stage s of leg s/ranks on rank
// s mod ranks on an even leg, ranks-1-(s mod ranks) on an odd one, so that
// every turn (the last rank, then rank 0) holds two adjacent stages and
// needs no transfer. Virtual 2 is VShape; 4 is the W shape. Its Name is
// "table" (String writes the table) for virtual > 2.
func Zigzag(ranks, virtual int) Placement {
	if virtual == 2 {
		return VShape(ranks)
	}
	p := Placement{Name: "table", NumRanks: ranks, RankOf: make([]int, ranks*virtual)}
	for s := range p.RankOf {
		p.RankOf[s] = s % ranks
		if (s/ranks)%2 == 1 {
			p.RankOf[s] = ranks - 1 - s%ranks
		}
	}
	if virtual == 1 {
		p.Name = "loop"
	}
	return p
}

// Table builds an explicit placement from a stage -> rank table. Every rank in
// 0..ranks-1 must hold at least one stage.
func Table(ranks int, rankOf []int) (Placement, error) {
	if ranks < 1 {
		return Placement{}, fmt.Errorf("placement table: ranks = %d; need at least 1", ranks)
	}
	held := make([]bool, ranks)
	for s, r := range rankOf {
		if r < 0 || r >= ranks {
			return Placement{}, fmt.Errorf("placement table: stage %d on rank %d, outside 0..%d", s, r, ranks-1)
		}
		held[r] = true
	}
	for r, ok := range held {
		if !ok {
			return Placement{}, fmt.Errorf("placement table: rank %d holds no stage; every rank needs one", r)
		}
	}
	return Placement{Name: "table", NumRanks: ranks, RankOf: append([]int(nil), rankOf...)}, nil
}

// ParsePlacement parses "loop", "v" or a table "0,1,1,0" (stage s on the
// s-th rank) for ranks ranks and virtual stages per rank (the loop's; v has
// two, a table as many as it lists). The shape is checked against the
// limits (CheckSize) before anything is allocated, so String's form of the
// result parses back to the same placement.
func ParsePlacement(text string, ranks, virtual int) (Placement, error) {
	if err := CheckSize(ranks, 1, 1); err != nil {
		return Placement{}, fmt.Errorf("placement %s: %w", quoteClip(text), err)
	}
	switch text {
	case "", "loop":
		if virtual < 1 || virtual > (MaxIndex+1)/ranks {
			return Placement{}, fmt.Errorf("placement loop: %w", &LimitError{What: fmt.Sprintf("stages (%d ranks × %d virtual)", ranks, virtual), Value: int64(ranks) * int64(virtual), Min: 1, Max: MaxIndex + 1})
		}
		return Loop(ranks, virtual), nil
	case "v":
		if 2*ranks > MaxIndex+1 {
			return Placement{}, fmt.Errorf("placement v: %w", &LimitError{What: fmt.Sprintf("stages (2 × %d ranks)", ranks), Value: 2 * int64(ranks), Min: 1, Max: MaxIndex + 1})
		}
		return VShape(ranks), nil
	}
	if n := strings.Count(text, ",") + 1; n > MaxIndex+1 {
		return Placement{}, fmt.Errorf("placement %s: %w", quoteClip(text), &LimitError{What: "stages", Value: int64(n), Min: 1, Max: MaxIndex + 1})
	}
	fields := strings.Split(text, ",")
	rankOf := make([]int, len(fields))
	for i, f := range fields {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return Placement{}, fmt.Errorf("placement %s: entry %d (%s) is not a rank number; want loop, v, or a comma-separated stage->rank table such as 0,1,1,0", quoteClip(text), i, quoteClip(f))
		}
		rankOf[i] = r
	}
	return Table(ranks, rankOf)
}

// Stages returns the number of virtual stages.
func (p Placement) Stages() int { return len(p.RankOf) }

// Ranks returns the number of ranks.
func (p Placement) Ranks() int { return p.NumRanks }

// Virtual returns the number of stages per rank when it is the same on every rank, or 0.
func (p Placement) Virtual() int {
	if p.NumRanks == 0 || len(p.RankOf)%p.NumRanks != 0 {
		return 0
	}
	count := make([]int, p.NumRanks)
	for _, r := range p.RankOf {
		count[r]++
	}
	v := len(p.RankOf) / p.NumRanks
	for _, c := range count {
		if c != v {
			return 0
		}
	}
	return v
}

// StagesOf returns the stages held by rank r in ascending order.
func (p Placement) StagesOf(r int) []int {
	var out []int
	for s, rr := range p.RankOf {
		if rr == r {
			out = append(out, s)
		}
	}
	return out
}

// Rank returns the rank holding stage s, or None when s is out of range.
func (p Placement) Rank(s int) int {
	if s < 0 || s >= len(p.RankOf) {
		return None
	}
	return p.RankOf[s]
}

// String returns "loop", "v" or the table form "0,1,1,0".
func (p Placement) String() string {
	if p.Name == "loop" || p.Name == "v" {
		return p.Name
	}
	parts := make([]string, len(p.RankOf))
	for i, r := range p.RankOf {
		parts[i] = strconv.Itoa(r)
	}
	return strings.Join(parts, ",")
}
