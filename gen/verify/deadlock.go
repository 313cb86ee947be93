package verify

import (
	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/internal/strict"
)

// deadlock runs the strict model once (gen/internal/strict): the model the
// walk built for a lowered program, or for a compute-only one a model in
// which each compute step waits for its producer on another rank; either
// with the waits of the TIE_GRAD exchanges (tieModel) and of the model
// copies' gradient exchange at OPT_STEP (copiesModel).
func (c *checker) deadlock() error {
	m := c.model
	if c.lowered {
		copy(m.OpPartner, c.opPartner)
	} else {
		m = c.computeModel()
	}
	m = c.copiesModel(c.tieModel(m))
	sim := strict.NewSim(m)
	if sim.Run() {
		return nil
	}
	waits, _ := sim.Stuck()
	e := &DeadlockError{Compute: !c.lowered}
	for _, w := range waits {
		bl := Blocked{Rank: w.Rank, Peer: w.Peer, Host: -1}
		if w.Host < m.HostLen(w.Rank) {
			bl.Host = int(c.hostIdx[int(m.HostOff[w.Rank])+w.Host])
			bl.HostStep = c.p.Ranks[w.Rank][bl.Host]
		}
		if w.Op >= 0 {
			bl.Index = int(c.opIdx[w.Op])
			bl.Step = c.p.Ranks[w.Rank][bl.Index]
		} else {
			bl.Index, bl.Step = bl.Host, bl.HostStep
			if w.On.Rank != strict.OpEvent && bl.Peer >= 0 {
				bl.On = c.p.Ranks[w.On.Rank][c.hostIdx[int(m.HostOff[w.On.Rank])+int(w.On.Index)]]
			}
		}
		e.Cycle = append(e.Cycle, bl)
	}
	return e
}

// computeModel builds the model of a compute-only program: every step is a
// host step (index on the rank = host index), and a compute step waits for
// the step producing its input (F(s-1)) or output gradient (B/I(s+1)) when
// that stage lives on another rank (deps.Of).
func (c *checker) computeModel() *strict.Model {
	b := strict.NewBuilder(c.rep.Steps, 0)
	M := c.M
	var ins []deps.Input
	for r, steps := range c.p.Ranks {
		b.StartRank()
		for i := range steps {
			b.Host()
			for _, sub := range steps[i].Computes() {
				ins = deps.Of(&c.p, &sub, ins[:0])
				for _, in := range ins {
					if in.Optional() || !in.Remote(r) {
						continue
					}
					b.Wait(strict.HostDone(in.Rank, int(c.at[atOf(in.Kind)][in.Stage*M+in.Micro])))
				}
			}
		}
	}
	return b.Model()
}
