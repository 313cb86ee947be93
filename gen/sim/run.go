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
// whose partners are at the head of their streams.
func (s *simulator) advanceComm(r int) bool {
	rs := &s.ranks[r]
	progressed := false
	for rs.commPos < len(rs.comm) {
		i := rs.comm[rs.commPos]
		if i >= rs.host {
			break // not posted yet
		}
		e := rs.off + i
		m := s.match[e]
		q := s.ev[m].Rank
		qs := &s.ranks[q]
		j := m - qs.off
		if qs.commPos >= len(qs.comm) || qs.comm[qs.commPos] != j || j >= qs.host {
			break
		}
		t := max(s.ev[e].Posted, rs.commFree, s.ev[m].Posted, qs.commFree)
		end := t + s.dur[e]
		s.ev[e].Start, s.ev[e].End = t, end
		s.ev[m].Start, s.ev[m].End = t, end
		s.done[e], s.done[m] = true, true
		rs.commFree, qs.commFree = end, end
		rs.commPos++
		qs.commPos++
		progressed = true
		if q != r {
			s.enqueue(q)
		}
	}
	return progressed
}
