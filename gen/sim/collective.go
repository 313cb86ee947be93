package sim

import "github.com/ppgen/ppgen/abi"

// The collectives (abi's IsCollective: ALL_REDUCE, `-clip`): the n-th step
// of a collective kind on every rank is one rendezvous, as gen/verify
// models it. Each waits for the last transfer of every rank before that
// rank's n-th (the runtime drains its comm stream, then reduces) and for
// every rank's host to reach it; all start at the same time, the latest of
// those, and take the kind's time (ALL_REDUCE: Cost.AllReduceTime). A rank
// without an n-th leaves the others waiting (run reports them stuck). A
// collective kind's file declares its meet with declareCollective.

func init() {
	declareCollective(abi.AllReduce, func(c *Cost, _ int) float64 { return c.AllReduceTime() })
}

// declareCollective declares the meet of collective kind k, whose steps
// take time(c, P) on P ranks.
func declareCollective(k abi.Kind, time func(c *Cost, ranks int) float64) {
	declareMeet(k, func(s *simulator) { s.collectiveDeps(k, time(&s.c, len(s.p.Ranks))) })
}

// collectiveDeps fills the dependencies, peers and costs (d each) of the
// events of collective kind k (after matchComm).
func (s *simulator) collectiveDeps(k abi.Kind, d float64) {
	var byRank [][]int // per rank, its events of kind k in order
	most := 0
	for r, steps := range s.p.Ranks {
		for i := range steps {
			if steps[i].Kind == k {
				if byRank == nil {
					byRank = make([][]int, len(s.p.Ranks))
				}
				byRank[r] = append(byRank[r], s.ranks[r].off+i)
			}
		}
		if byRank != nil {
			most = max(most, len(byRank[r]))
		}
	}
	if byRank == nil {
		return
	}
	if s.peers == nil {
		s.peers = make([][]int, len(s.ev))
	}
	for n := range most {
		members := make([]int, len(byRank)) // the n-th of each rank, or -1
		var ds []dep
		for q, evs := range byRank {
			members[q] = -1
			if n < len(evs) {
				members[q] = evs[n]
				ds = append(ds, s.lastComm(q, s.ev[evs[n]].Index)...)
			}
		}
		for q, e := range members {
			if e < 0 {
				continue
			}
			s.dur[e] = d
			s.deps[e] = ds
			peers := make([]int, 0, len(members)-1)
			peers = append(peers, members[:q]...)
			s.peers[e] = append(peers, members[q+1:]...)
		}
	}
}
