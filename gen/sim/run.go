package sim

import ()

func (s *simulator) enqueue(r int) {
	if !s.queued[r] {
		s.queued[r] = true
		s.queue = append(s.queue, r)
	}
}

func (s *simulator) run() {
	P := len(s.ranks)
	s.queued = make([]bool, P)
	for r := 0; r < P; r++ {
		s.enqueue(r)
	}
	for len(s.queue) > 0 {
		r := s.queue[0]
		s.queue = s.queue[1:]
		s.queued[r] = false
		progressed := false
		for {
			a := s.advanceHost(r)
			b := s.advanceComm(r)
			if !a && !b {
				break
			}
			progressed = true
		}
		if progressed {
			for _, q := range s.watch[r] {
				s.enqueue(q)
			}
		}
	}
}

// advanceHost runs rank r's host as far as it can go.
func (s *simulator) advanceHost(r int) bool {
	rs := &s.ranks[r]
	progressed := false
	for rs.host < rs.n {
		e := rs.off + rs.host
		ev := &s.ev[e]
		ev.Posted = rs.h
		switch s.cls[e] {
		case clComm:
			// Posted; completes on the comm stream (advanceComm).
		case clLaunch:
			ev.Start = max(rs.h, rs.swapFree)
			ev.End = ev.Start + s.dur[e]
			rs.swapFree = ev.End
			s.done[e] = true
		case clGather:
			ev.Start = max(rs.h, rs.fsdpFree)
			ev.End = ev.Start + s.dur[e]
			rs.fsdpFree = ev.End
			s.done[e] = true
		case clLocal:
			ev.Start, ev.End = rs.h, rs.h+s.dur[e]
			rs.h = ev.End
			s.done[e] = true
		case clMeet:
			t, ok := s.meetStart(e, rs.h)
			if !ok {
				return progressed
			}
			ev.Start, ev.End = t, t+s.dur[e]
			rs.h = ev.End
			s.done[e] = true
		case clCompute, clWait:
			t := rs.h
			for _, d := range s.deps[e] {
				if d.ev < 0 || !s.done[d.ev] {
					return progressed
				}
				t = max(t, s.ev[d.ev].End+d.lat)
			}
			if s.cls[e] == clWait {
				ev.Start, ev.End = rs.h, t
			} else {
				ev.Start, ev.End = t, t+s.dur[e]
			}
			rs.h = ev.End
			s.done[e] = true
		}
		rs.host++
		progressed = true
	}
	return progressed
}

// advanceComm completes the transfers at the head of rank r's comm stream
// whose partners are at the head of their streams (a transfer of a batch:
// anywhere in the batch at the head). The transfers of a batch start
// together, each when its partner is ready, and the stream is free again
// when the last of them ends.
func (s *simulator) advanceComm(r int) bool {
	rs := &s.ranks[r]
	progressed := false
	for rs.commPos < len(rs.comm) {
		i := rs.comm[rs.commPos]
		e := rs.off + i
		if s.bFirst != nil && s.bEnd[e]-s.bFirst[e] > 1 {
			if !s.advanceBatch(r, e) {
				return progressed
			}
			progressed = true
			continue
		}
		if i >= rs.host {
			break // not posted yet
		}
		m := s.match[e]
		if !s.ready(m) {
			break
		}
		s.pair(e, m)
		progressed = true
	}
	return progressed
}

// ready reports whether transfer m (not done) may complete now: posted,
// and at the head of its stream or in the batch at the head.
func (s *simulator) ready(m int) bool {
	q := s.ev[m].Rank
	qs := &s.ranks[q]
	if s.done[m] || m-qs.off >= qs.host || qs.commPos >= len(qs.comm) {
		return false
	}
	head := qs.off + qs.comm[qs.commPos]
	if s.bFirst == nil {
		return head == m
	}
	return m >= s.bFirst[head] && m < s.bEnd[head]
}

// pair completes the matched transfers e and m, and moves the stream of
// each that is not in a batch past it.
func (s *simulator) pair(e, m int) {
	r, q := s.ev[e].Rank, s.ev[m].Rank
	rs, qs := &s.ranks[r], &s.ranks[q]
	t := max(s.ev[e].Posted, rs.commFree, s.ev[m].Posted, qs.commFree)
	end := t + s.dur[e]
	s.ev[e].Start, s.ev[e].End = t, end
	s.ev[m].Start, s.ev[m].End = t, end
	s.done[e], s.done[m] = true, true
	for _, x := range [2]int{e, m} {
		if s.bFirst == nil || s.bEnd[x]-s.bFirst[x] == 1 {
			xs := &s.ranks[s.ev[x].Rank]
			xs.commFree = end
			xs.commPos++
		}
	}
	if q != r {
		s.enqueue(q)
	}
}

// advanceBatch completes what it can of the batch at the head of rank r's
// stream (whose first event is at or before e) and, when all of it is
// done, moves the stream past it; it reports whether the batch completed.
func (s *simulator) advanceBatch(r, e int) bool {
	rs := &s.ranks[r]
	first, end := s.bFirst[e], s.bEnd[e]
	if first-rs.off >= rs.host {
		return false // not posted yet
	}
	all := true
	for x := first; x < end; x++ {
		if s.done[x] {
			continue
		}
		if m := s.match[x]; s.ready(m) {
			s.pair(x, m)
			continue
		}
		all = false
	}
	if !all {
		return false
	}
	for x := first; x < end; x++ {
		rs.commFree = max(rs.commFree, s.ev[x].End)
	}
	rs.commPos += end - first
	return true
}
