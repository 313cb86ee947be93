package sim

import "github.com/ppgen/ppgen/abi"

// The collectives (ALL_REDUCE, `-clip`): the n-th ALL_REDUCE of every rank
// is one rendezvous, as gen/verify models it. Each waits for the last
// transfer of every rank before that rank's n-th (the runtime drains its
// comm stream, then reduces) and for every rank's host to reach it; all
// start at the same time, the latest of those, and take
// Cost.AllReduceTime. A rank without an n-th leaves the others waiting
// (run reports them stuck).

func init() { declareMeet(abi.AllReduce, (*simulator).collectiveDeps) }

// collectiveDeps fills the dependencies, peers and costs of the ALL_REDUCE
// events (after matchComm).
func (s *simulator) collectiveDeps() {
	var byRank [][]int // per rank, its ALL_REDUCE events in order
	most := 0
	for r, steps := range s.p.Ranks {
		for i := range steps {
			if steps[i].Kind.IsCollective() {
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
	d := s.c.AllReduceTime()
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
