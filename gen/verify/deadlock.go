package verify

import (
	"github.com/ppgen/ppgen/gen/internal/strict"
	"github.com/ppgen/ppgen/gen/ir"
)

// deadlock runs the strict model once (gen/internal/strict).
func (c *checker) deadlock() error {
	b := strict.NewBuilder(c.rep.Steps-len(c.opRank), len(c.opRank))
	hostIdx := make([]int32, 0, c.rep.Steps-len(c.opRank)) // global host step -> index on its rank
	M := c.M
	for r, steps := range c.p.Ranks {
		b.StartRank()
		for i, st := range steps {
			if st.Kind.IsComm() {
				b.Op()
				continue
			}
			b.Host()
			hostIdx = append(hostIdx, int32(i))
			for _, sub := range st.Computes() {
				s, ch := sub.Stage, sub.Stage*M+sub.Micro
				switch sub.Kind {
				case ir.Forward:
					if s > 0 && c.rankOf[s-1] != r {
						if !c.lowered {
							b.Wait(strict.HostDone(c.rankOf[s-1], int(c.at[aF][ch-M])))
						} else if c.at[aRecvF][ch] >= 0 {
							b.Wait(strict.OpDone(c.opAt[aRecvF][ch]))
						}
					}
					if c.at[aDRecv][ch] >= 0 {
						b.Wait(strict.OpDone(c.opAt[aDRecv][ch]))
					}
				case ir.Backward, ir.BackwardInput:
					if s < c.S-1 && c.rankOf[s+1] != r {
						if !c.lowered {
							b.Wait(strict.HostDone(c.rankOf[s+1], int(c.at[aBwd][ch+M])))
						} else if c.at[aRecvB][ch] >= 0 {
							b.Wait(strict.OpDone(c.opAt[aRecvB][ch]))
						}
					}
				}
			}
		}
	}
	m := b.Model()
	copy(m.OpPartner, c.opPartner)
	sim := strict.NewSim(m)
	if sim.Run() {
		return nil
	}
	waits, _ := sim.Stuck()
	e := &DeadlockError{Compute: !c.lowered}
	for _, w := range waits {
		bl := Blocked{Rank: w.Rank, Peer: w.Peer, Host: -1}
		if w.Host < m.HostLen(w.Rank) {
			bl.Host = int(hostIdx[int(m.HostOff[w.Rank])+w.Host])
			bl.HostStep = c.p.Ranks[w.Rank][bl.Host]
		}
		if w.Op >= 0 {
			bl.Index = int(c.opIdx[w.Op])
			bl.Step = c.p.Ranks[w.Rank][bl.Index]
		} else {
			bl.Index, bl.Step = bl.Host, bl.HostStep
			if w.On.Rank != strict.OpEvent && bl.Peer >= 0 {
				bl.On = c.p.Ranks[w.On.Rank][hostIdx[int(m.HostOff[w.On.Rank])+int(w.On.Index)]]
			}
		}
		e.Cycle = append(e.Cycle, bl)
	}
	return e
}
