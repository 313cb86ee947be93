package sim

import "github.com/ppgen/ppgen/gen/ir"

// The tie exchange (TIE_GRAD, `-tie A:B`): a host step that, across ranks,
// is a rendezvous as gen/verify models it. Each of the two steps waits for
// the last transfer of its own rank before it and for the peer's last
// transfer before the peer's TIE_GRAD (the runtime drains its comm stream,
// then sends and receives), and for the peer's host to reach its TIE_GRAD;
// both start at the same time, the latest of those, and take TieTime. A
// tie within one rank is a local sum of the same cost without the waits.

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
	s.tiePeer = make([]int, len(s.ev))
	for e := range s.tiePeer {
		s.tiePeer[e] = -1
	}
	// lastComm is the last transfer event of rank r before step i (with
	// the rest of its batch), as dependencies.
	lastComm := func(r, i int) []dep {
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
		s.tiePeer[e] = pe
		s.deps[e] = append(lastComm(k.rank, s.ev[e].Index), lastComm(q, s.ev[pe].Index)...)
	}
}

// tieStart returns when TIE_GRAD event e, its host free at h, starts, and
// false while it cannot start yet.
func (s *simulator) tieStart(e int, h float64) (float64, bool) {
	t := h
	for _, d := range s.deps[e] {
		if !s.done[d.ev] {
			return 0, false
		}
		t = max(t, s.ev[d.ev].End)
	}
	if s.tiePeer == nil || s.tiePeer[e] < 0 {
		return t, true
	}
	pe := s.tiePeer[e]
	if s.done[pe] {
		return max(t, s.ev[pe].Start), true
	}
	qs := &s.ranks[s.ev[pe].Rank]
	if qs.host < pe-qs.off {
		return 0, false // the peer's host has not reached its TIE_GRAD
	}
	return max(t, qs.h), true
}
