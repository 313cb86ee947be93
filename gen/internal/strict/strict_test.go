package strict

import (
	"slices"
	"testing"
)

// step is one entry of a test rank: a host step waiting for the ops named
// in waits (by label), or a comm op with a label and the label of its partner.
type step struct {
	op      string // label of a comm op; "" for a host step
	partner string
	waits   []string
	host    [][2]int // host waits: (rank, index)
}

func h(waits ...string) step       { return step{waits: waits} }
func o(label, partner string) step { return step{op: label, partner: partner} }
func hw(rank, index int) step      { return step{host: [][2]int{{rank, index}}} }
func build(ranks ...[]step) (*Model, map[string]int32) {
	b := NewBuilder(0, 0)
	// Op ids are given in order of appearance; a wait may name a later op.
	ids := map[string]int32{}
	for _, steps := range ranks {
		for _, st := range steps {
			if st.op != "" {
				ids[st.op] = int32(len(ids))
			}
		}
	}
	type pair struct{ a, b string }
	var pairs []pair
	for _, steps := range ranks {
		b.StartRank()
		for _, st := range steps {
			if st.op != "" {
				if id := b.Op(); id != ids[st.op] {
					panic("op ids out of order")
				}
				pairs = append(pairs, pair{st.op, st.partner})
				continue
			}
			b.Host()
			for _, w := range st.waits {
				b.Wait(OpDone(ids[w]))
			}
			for _, hw := range st.host {
				b.Wait(HostDone(hw[0], hw[1]))
			}
		}
	}
	for _, p := range pairs {
		if q, ok := ids[p.b]; ok && p.b != "" {
			b.Pair(ids[p.a], q)
		}
	}
	return b.Model(), ids
}

func TestRun(t *testing.T) {
	tests := []struct {
		name  string
		ranks [][]step
		done  bool
		cycle []int // ranks of the stuck ring, lowest first
		ring  bool
	}{
		{
			name: "a send and its receive",
			ranks: [][]step{
				{h(), o("s", "r")},
				{o("r", "s"), h("r")},
			},
			done: true,
		},
		{
			name: "crossed sends between two ranks",
			ranks: [][]step{
				{h(), o("s01", "r01"), o("r10", "s10"), h("r10")},
				{h(), o("s10", "r10"), o("r01", "s01"), h("r01")},
			},
			cycle: []int{0, 1}, ring: true,
		},
		{
			name: "the same with one rank receiving first",
			ranks: [][]step{
				{h(), o("s01", "r01"), o("r10", "s10"), h("r10")},
				{o("r01", "s01"), h(), o("s10", "r10"), h("r01")},
			},
			done: true,
		},
		{
			name: "compute waits for a receive posted after it",
			ranks: [][]step{
				{h(), o("s", "r")},
				{h("r"), o("r", "s")},
			},
			cycle: []int{0, 1}, ring: true,
		},
		{
			name: "ring of three",
			ranks: [][]step{
				{o("a", "a'"), o("c'", "c")},
				{o("b", "b'"), o("a'", "a")},
				{o("c", "c'"), o("b'", "b")},
			},
			cycle: []int{0, 1, 2}, ring: true,
		},
		{
			name: "unmatched send: a chain, not a ring",
			ranks: [][]step{
				{h(), o("s", "")},
				{h()},
			},
			cycle: []int{0},
		},
		{
			name: "compute-only: host waits across ranks",
			ranks: [][]step{
				{h(), hw(1, 0)},
				{h(), hw(0, 0)},
			},
			done: true,
		},
		{
			name: "compute-only: a dependency cycle",
			ranks: [][]step{
				{hw(1, 1), h()},
				{h(), hw(0, 1)},
			},
			cycle: []int{0, 1}, ring: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := build(tc.ranks...)
			s := NewSim(m)
			if got := s.Run(); got != tc.done {
				t.Fatalf("Run = %v, want %v", got, tc.done)
			}
			if tc.done {
				if w, _ := s.Stuck(); w != nil {
					t.Errorf("Stuck = %v on a finished run", w)
				}
				return
			}
			w, ring := s.Stuck()
			var ranks []int
			for _, x := range w {
				ranks = append(ranks, x.Rank)
			}
			if !slices.Equal(ranks, tc.cycle) || ring != tc.ring {
				t.Errorf("Stuck = %v (ring %v), want ranks %v (ring %v)", w, ring, tc.cycle, tc.ring)
			}
			for i, x := range w {
				if ring && x.Peer != w[(i+1)%len(w)].Rank {
					t.Errorf("ring entry %d waits for %d, next is %d", i, x.Peer, w[(i+1)%len(w)].Rank)
				}
			}
		})
	}
}

func TestHoist(t *testing.T) {
	// Crossed sends; hoisting rank 1's receive before its send unblocks them.
	m, ids := build(
		[]step{h(), o("s01", "r01"), o("r10", "s10"), h("r10")},
		[]step{h(), o("s10", "r10"), o("r01", "s01"), h("r01")},
	)
	s := NewSim(m)
	if s.Run() {
		t.Fatal("crossed sends completed")
	}
	touched := s.Touched()
	if len(touched) != 2 {
		t.Errorf("Touched = %v, want both ranks", touched)
	}
	if op, posted := s.Head(0); op != ids["s01"] || !posted {
		t.Fatalf("head of rank 0 = %d (posted %v), want s01", op, posted)
	}
	if s.Hoist(ids["s01"]) {
		t.Error("hoisting a send whose partner is not a head succeeded")
	}
	if !s.Hoist(ids["r01"]) {
		t.Fatal("Hoist(r01) failed")
	}
	if s.Gap(ids["r01"]) != 1 || !s.Done(ids["r01"]) || !s.Done(ids["s01"]) {
		t.Errorf("after hoist: gap %d done %v/%v", s.Gap(ids["r01"]), s.Done(ids["r01"]), s.Done(ids["s01"]))
	}
	if !s.Run() {
		t.Fatal("still stuck after the hoist")
	}
	if got, want := s.Order(1), []int32{ids["r01"], ids["s10"]}; !slices.Equal(got, want) {
		t.Errorf("rank 1 completion order %v, want %v (the hoisted receive first)", got, want)
	}
	if s.Hoist(ids["r01"]) {
		t.Error("hoisting a completed op succeeded")
	}
}
