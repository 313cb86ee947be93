package strict

import (
	"fmt"
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
	batch   int      // ops of one rank with the same batch > 0 form a batch
}

func h(waits ...string) step       { return step{waits: waits} }
func o(label, partner string) step { return step{op: label, partner: partner} }
func hw(rank, index int) step      { return step{host: [][2]int{{rank, index}}} }

// ob is o in batch n (> 0): consecutive ops of one rank with the same n
// form one batch.
func ob(n int, label, partner string) step { return step{op: label, partner: partner, batch: n} }
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
	var batches [][2]int32 // first, end of each batch of more than one op
	for _, steps := range ranks {
		b.StartRank()
		first, cur := int32(-1), 0
		closeBatch := func(end int32) {
			if cur > 0 && end-first > 1 {
				batches = append(batches, [2]int32{first, end})
			}
			cur = 0
		}
		for _, st := range steps {
			if st.op != "" {
				if st.batch != cur {
					closeBatch(ids[st.op])
				}
				if st.batch > 0 && cur == 0 {
					first, cur = ids[st.op], st.batch
				}
				if id := b.Op(); id != ids[st.op] {
					panic("op ids out of order")
				}
				pairs = append(pairs, pair{st.op, st.partner})
				continue
			}
			closeBatch(int32(len(b.m.OpRank)))
			b.Host()
			for _, w := range st.waits {
				b.Wait(OpDone(ids[w]))
			}
			for _, hw := range st.host {
				b.Wait(HostDone(hw[0], hw[1]))
			}
		}
		closeBatch(int32(len(b.m.OpRank)))
	}
	// Partners and batches are filled in as comm insertion and the
	// verifier fill them.
	m := b.Model()
	for _, p := range pairs {
		if q, ok := ids[p.b]; ok && p.b != "" {
			m.OpPartner[ids[p.a]], m.OpPartner[q] = q, ids[p.a]
		}
	}
	if len(batches) > 0 {
		m.BatchFirst, m.BatchEnd = make([]int32, m.NumOps()), make([]int32, m.NumOps())
		for op := range int32(m.NumOps()) {
			m.BatchFirst[op], m.BatchEnd[op] = op, op+1
		}
		for _, bt := range batches {
			for op := bt[0]; op < bt[1]; op++ {
				m.BatchFirst[op], m.BatchEnd[op] = bt[0], bt[1]
			}
		}
	}
	return m, ids
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
			name: "crossed sends batched on both ranks",
			ranks: [][]step{
				{h(), ob(1, "s01", "r01"), ob(1, "r10", "s10"), h("r10")},
				{h(), ob(1, "s10", "r10"), ob(1, "r01", "s01"), h("r01")},
			},
			done: true,
		},
		{
			name: "crossed sends batched on one rank only",
			ranks: [][]step{
				{h(), ob(1, "s01", "r01"), ob(1, "r10", "s10"), h("r10")},
				{h(), o("s10", "r10"), o("r01", "s01"), h("r01")},
			},
			done: true,
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
	// Each case runs on a fresh Sim, then on the Sim of the case before
	// (NewSimInto: another model, run to its end), which must change nothing.
	var reused *Sim
	for _, tc := range tests {
		for _, reuse := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reuse=%v", tc.name, reuse), func(t *testing.T) {
				m, _ := build(tc.ranks...)
				s := NewSim(m)
				if reuse {
					s = NewSimInto(reused, m)
					reused = s
				}
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
}

// TestBatchWait checks that a host step waiting for one op of a batch waits
// for the whole batch, and that ops of a batch complete out of stream order.
func TestBatchWait(t *testing.T) {
	// Rank 1 batches a receive from rank 0 and one from rank 2, which rank 2
	// sends only after its own receive from rank 0, the last op of rank 0.
	m, ids := build(
		[]step{o("s01", "r01"), h(), o("s02", "r02")},
		[]step{h(), ob(1, "r21", "s21"), ob(1, "r01", "s01"), h("r01"), h()},
		[]step{o("r02", "s02"), h("r02"), o("s21", "r21")},
	)
	s := NewSim(m)
	if !s.Run() {
		w, _ := s.Stuck()
		t.Fatalf("stuck: %v", w)
	}
	if got, want := s.Order(1), []int32{ids["r01"], ids["r21"]}; !slices.Equal(got, want) {
		t.Errorf("rank 1 completed %v, want %v (r01 first, out of stream order)", got, want)
	}
	// Without rank 2's send, r01 completes but its consumer still waits.
	m, ids = build(
		[]step{o("s01", "r01")},
		[]step{ob(1, "r21", ""), ob(1, "r01", "s01"), h("r01")},
		[]step{h()},
	)
	s = NewSim(m)
	if s.Run() {
		t.Fatal("a batch with an unmatched op completed")
	}
	if !s.done[ids["r01"]] || s.host[1] != 0 {
		t.Errorf("r01 done %v, rank 1's host at %d; want r01 done and the host blocked at 0", s.done[ids["r01"]], s.host[1])
	}
	inBatch := func(op int32) bool { return m.BatchEnd[op]-m.BatchFirst[op] > 1 }
	if !inBatch(ids["r01"]) || inBatch(ids["s01"]) {
		t.Errorf("r01 in a batch: %v, s01: %v; want true, false", inBatch(ids["r01"]), inBatch(ids["s01"]))
	}
	if s.Hoist(ids["s01"]) {
		t.Error("Hoist in a model with batches succeeded")
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
	if s.Gap(ids["r01"]) != 1 || !s.done[ids["r01"]] || !s.done[ids["s01"]] {
		t.Errorf("after hoist: gap %d done %v/%v", s.Gap(ids["r01"]), s.done[ids["r01"]], s.done[ids["s01"]])
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

// TestWaitForAnotherRanksOp: a host step may wait for an op of another
// rank (a tie's exchange waits for the peer's last transfer); it runs once
// that op completes, whichever rank completes it, and a rank that passed
// its rendezvous host step first does not leave the other behind.
func TestWaitForAnotherRanksOp(t *testing.T) {
	// Ranks 0 and 1 each exchange (host steps waiting for the other's
	// host and for both ranks' last op); rank 1's last op pairs with
	// rank 2's, which rank 2 posts late.
	m, _ := build(
		[]step{o("a", "b"), {waits: []string{"a", "c"}, host: [][2]int{{1, 0}}}},
		[]step{h(), o("b", "a"), o("c", "d"), {waits: []string{"c", "a"}, host: [][2]int{{0, 0}}}},
		[]step{h(), h(), o("d", "c")},
	)
	s := NewSim(m)
	if !s.Run() {
		t.Fatalf("stuck: %v", func() []Wait { w, _ := s.Stuck(); return w }())
	}
}
