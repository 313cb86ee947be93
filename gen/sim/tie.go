package sim

import "github.com/ppgen/ppgen/gen/ir"

// The tie exchange (TIE_GRAD, `-tie A:B`): a host step that, across ranks,
// is a rendezvous as gen/verify models it (meetStart times it; ALL_REDUCE,
// collective.go, is the rendezvous of every rank). Each of the two steps waits for
// the last transfer of its own rank before it and for the peer's last
// transfer before the peer's TIE_GRAD (the runtime drains its comm stream,
// then sends and receives), and for the peer's host to reach its TIE_GRAD;
// both start at the same time, the latest of those, and take TieTime. A
// tie within one rank is a local sum of the same cost without the waits.

func init() { declareMeet(ir.TieGrad, (*simulator).tieDeps) }

// tieDeps fills the dependencies, peers and costs of the TIE_GRAD events
// (after matchComm).
func (s *simulator) tieDeps() {
	type key struct{ rank, stage int }
	at := map[key]int{}
	for r, steps := range s.p.Ranks {
		for i, st := range steps {
			if st.Kind == ir.TieGrad {
				at[key{r, st.Stage}] = s.ranks[r].off + i
			}
		}
	}
	if len(at) == 0 {
		return
	}
	if s.peers == nil {
		s.peers = make([][]int, len(s.ev))
	}
	for k, e := range at {
		other := k.stage
		t, ok := ir.TieOf(s.p.Ties, k.stage)
		if ok {
			other = t.Other(k.stage)
		}
		s.dur[e] = s.c.TieTime(k.stage, other)
		if !ok || other < 0 || other >= len(s.p.Placement.RankOf) {
			continue
		}
		q := s.p.Placement.RankOf[other]
		pe, found := at[key{q, other}]
		if q == k.rank || !found {
			continue
		}
		s.peers[e] = []int{pe}
		s.deps[e] = append(s.lastComm(k.rank, s.ev[e].Index), s.lastComm(q, s.ev[pe].Index)...)
	}
}

// lastComm returns the last transfer event of rank r before step i (with
// the rest of its batch), as dependencies: what a rendezvous step waits for
// on each rank taking part (the runtime drains the comm stream first).
func (s *simulator) lastComm(r, i int) []dep {
	rs := &s.ranks[r]
	var ds []dep
	for n := len(rs.comm) - 1; n >= 0; n-- {
		if c := rs.comm[n]; c < i {
			e := rs.off + c
			first, end := e, e+1
			if s.bFirst != nil {
				first, end = s.bFirst[e], s.bEnd[e]
			}
			for x := first; x < end; x++ {
				ds = append(ds, dep{ev: x})
			}
			break
		}
	}
	return ds
}

// meetStart returns when rendezvous event e (TIE_GRAD, ALL_REDUCE), its
// host free at h, starts, and false while it cannot start yet: after its
// dependencies, and once every peer's host has reached its own step (a
// peer of -1, a member that never posts it, keeps it waiting). All members
// start at the same time.
func (s *simulator) meetStart(e int, h float64) (float64, bool) {
	t := h
	for _, d := range s.deps[e] {
		if !s.done[d.ev] {
			return 0, false
		}
		t = max(t, s.ev[d.ev].End)
	}
	if s.peers == nil {
		return t, true
	}
	for _, pe := range s.peers[e] {
		if pe < 0 {
			return 0, false
		}
		if s.done[pe] {
			return max(t, s.ev[pe].Start), true
		}
		qs := &s.ranks[s.ev[pe].Rank]
		if qs.host < pe-qs.off {
			return 0, false // the peer's host has not reached its step
		}
		t = max(t, qs.h)
	}
	return t, true
}
