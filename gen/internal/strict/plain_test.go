package strict

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// randomModel builds a model without batches from a random run: step
// after step, a random rank either runs a host step that waits for events
// that happened before (its own ops, now and then a host step or an op of
// another rank) or posts a transfer with another rank that completes at
// once. Such a model completes (the run is its schedule); a few random
// mutations (a wait for an event that comes later, two steps of a rank
// swapped, a partner dropped) make many of them deadlock.
func randomModel(rng *rand.Rand) *Model {
	n := 2 + rng.IntN(4)
	type ref struct{ op, rank, k int } // the k-th op (op 1) or host step (op 0) of rank, as generated
	type item struct {
		self, peer ref // peer: an op's partner (rank -1: none)
		waits      []ref
	}
	ranks := make([][]item, n)
	count := make([][2]int, n) // per rank: host steps, ops
	var events []ref           // what has happened so far
	for range 4 + rng.IntN(30) {
		r := rng.IntN(n)
		if q := rng.IntN(n); q != r && rng.IntN(3) == 0 {
			a, b := ref{1, r, count[r][1]}, ref{1, q, count[q][1]}
			ranks[r] = append(ranks[r], item{self: a, peer: b})
			ranks[q] = append(ranks[q], item{self: b, peer: a})
			count[r][1]++
			count[q][1]++
			events = append(events, a, b)
			continue
		}
		it := item{self: ref{0, r, count[r][0]}}
		for range rng.IntN(3) {
			if len(events) == 0 {
				break
			}
			e := events[rng.IntN(len(events))]
			if e.rank == r && e.op == 0 {
				continue // its own host steps come before it anyway
			}
			if e.rank == r || rng.IntN(3) == 0 {
				it.waits = append(it.waits, e)
			}
		}
		ranks[r] = append(ranks[r], it)
		count[r][0]++
		events = append(events, it.self)
	}
	for range rng.IntN(3) {
		r := rng.IntN(n)
		l := len(ranks[r])
		if l == 0 {
			continue
		}
		i := rng.IntN(l)
		switch rng.IntN(3) {
		case 0: // wait for any event, maybe a later one
			if e := events[rng.IntN(len(events))]; ranks[r][i].self.op == 0 && e != ranks[r][i].self {
				ranks[r][i].waits = append(ranks[r][i].waits, e)
			}
		case 1: // swap two adjacent steps
			if i+1 < l {
				ranks[r][i], ranks[r][i+1] = ranks[r][i+1], ranks[r][i]
			}
		case 2: // unmatch a transfer (partners are mutual: both sides)
			if peer := ranks[r][i].peer; ranks[r][i].self.op == 1 && peer.rank >= 0 {
				for j := range ranks[peer.rank] {
					if ranks[peer.rank][j].self == peer {
						ranks[peer.rank][j].peer = ref{rank: -1}
					}
				}
				ranks[r][i].peer = ref{rank: -1}
			}
		}
	}
	// Number the steps as they now stand: op ids in rank order, host
	// indices per rank.
	num := map[ref]int32{}
	id := int32(0)
	for r := range ranks {
		host := int32(0)
		for _, it := range ranks[r] {
			if it.self.op == 1 {
				num[it.self] = id
				id++
			} else {
				num[it.self] = host
				host++
			}
		}
	}
	b := NewBuilder(0, 0)
	for r := range ranks {
		b.StartRank()
		for _, it := range ranks[r] {
			if it.self.op == 1 {
				b.Op()
				continue
			}
			b.Host()
			for _, e := range it.waits {
				if e.op == 1 {
					b.Wait(OpDone(num[e]))
				} else {
					b.Wait(HostDone(e.rank, int(num[e])))
				}
			}
		}
	}
	m := b.Model()
	for r := range ranks {
		for _, it := range ranks[r] {
			if it.self.op == 1 && it.peer.rank >= 0 {
				m.OpPartner[num[it.self]] = num[it.peer]
			}
		}
	}
	return m
}

// naiveRun is the strict model by its definition, without worklists: pass
// after pass, run every host step whose waits are done and complete every
// matched pair that are both the posted heads of their streams, until
// nothing moves. It returns the host steps passed and ops done per rank.
func naiveRun(m *Model) (host, nDone []int32) {
	n := m.Ranks()
	host, nDone = make([]int32, n), make([]int32, n)
	done := make([]bool, m.NumOps())
	evDone := func(e Event) bool {
		if e.Rank == OpEvent {
			return done[e.Index]
		}
		return host[e.Rank] > e.Index
	}
	head := func(r int) int32 {
		if op := m.OpOff[r] + nDone[r]; op < m.OpOff[r+1] && m.OpGap[op] <= host[r] {
			return op
		}
		return -1
	}
	for moved := true; moved; {
		moved = false
		for r := range n {
			for host[r] < int32(m.HostLen(r)) {
				h := m.HostOff[r] + host[r]
				ok := true
				for _, e := range m.Waits[m.WaitOff[h]:m.WaitOff[h+1]] {
					ok = ok && evDone(e)
				}
				if !ok {
					break
				}
				host[r]++
				moved = true
			}
		}
		for r := range n {
			op := head(r)
			if op < 0 || m.OpPartner[op] < 0 {
				continue
			}
			p := m.OpPartner[op]
			if q := int(m.OpRank[p]); q != r && head(q) == p {
				done[op], done[p] = true, true
				nDone[r]++
				nDone[q]++
				moved = true
			}
		}
	}
	return host, nDone
}

// TestPlainMatchesGeneral runs random models without batches three ways:
// the plain fast path, the general process (forced) and naiveRun. All
// three must agree on the outcome and the state it stops in, and the two
// Sims on what a stuck rank waits for and on the cycle Stuck names; and
// after each Hoist (as comm insertion drives it) they must go on agreeing.
func TestPlainMatchesGeneral(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 1))
	var ok, stuck, hoisted int
	for i := range 3000 {
		m := randomModel(rng)
		plain, gen := NewSim(m), NewSim(m)
		if !plain.plain {
			t.Fatal("a model without batches does not run plain")
		}
		gen.plain = false
		wantHost, wantDone := naiveRun(m)
		for round := 0; ; round++ {
			a, b := plain.Run(), gen.Run()
			if a != b {
				t.Fatalf("model %d round %d: plain Run %v, general %v", i, round, a, b)
			}
			if !slices.Equal(plain.host, gen.host) || !slices.Equal(plain.nDone, gen.nDone) || !slices.Equal(plain.done, gen.done) {
				t.Fatalf("model %d round %d: plain stops at host %v done %v, general at %v %v", i, round, plain.host, plain.nDone, gen.host, gen.nDone)
			}
			if round == 0 && (!slices.Equal(plain.host, wantHost) || !slices.Equal(plain.nDone, wantDone)) {
				t.Fatalf("model %d: Run stops at host %v done %v, the model's definition at %v %v", i, plain.host, plain.nDone, wantHost, wantDone)
			}
			for r := range m.Ranks() {
				if !slices.Equal(plain.Order(r), gen.Order(r)) {
					t.Fatalf("model %d round %d rank %d: order %v, general %v", i, round, r, plain.Order(r), gen.Order(r))
				}
			}
			if a {
				ok += 1 - min(round, 1)
				break
			}
			if round == 0 {
				stuck++
			}
			for r := range m.Ranks() {
				if plain.Unfinished(r) && plain.WaitOf(r) != gen.WaitOf(r) {
					t.Fatalf("model %d rank %d: plain waits %+v, general %+v", i, r, plain.WaitOf(r), gen.WaitOf(r))
				}
			}
			pw, pr := plain.Stuck()
			gw, gr := gen.Stuck()
			if pr != gr || !slices.Equal(pw, gw) {
				t.Fatalf("model %d: plain stuck %v %v, general %v %v", i, pw, pr, gw, gr)
			}
			// Hoist the receive of the lowest rank's posted head, as comm
			// insertion does, into both.
			hoist := int32(-1)
			for r := range m.Ranks() {
				if op, posted := plain.Head(r); op >= 0 && posted && m.OpPartner[op] >= 0 {
					hoist = m.OpPartner[op]
					break
				}
			}
			ha, hb := plain.Hoist(hoist), gen.Hoist(hoist)
			if ha != hb {
				t.Fatalf("model %d: plain Hoist %v, general %v", i, ha, hb)
			}
			if !ha {
				break
			}
			hoisted++
			if plain.plain {
				t.Fatal("a Sim stays plain after a Hoist")
			}
		}
	}
	t.Logf("%d models complete, %d stuck, %d hoists", ok, stuck, hoisted)
	// The generator must exercise both outcomes and the hoists.
	if ok < 300 || stuck < 300 || hoisted < 300 {
		t.Fatalf("random models: %d complete, %d stuck, %d hoists: too few of one", ok, stuck, hoisted)
	}
}
