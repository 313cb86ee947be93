package verify

import (
	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/internal/strict"
)

// deadlock runs the strict model once (gen/internal/strict): the model the
// walk built for a lowered program, or for a compute-only one a model in
// which each compute step waits for its producer on another rank; either
// with the waits of the TIE_GRAD exchanges (tieModel), of the collectives
// (collectiveModel) and of the model copies' exchange at OPT_STEP
// (copiesModel).
func (c *checker) deadlock() error {
	m := c.model
	if c.lowered {
		copy(m.OpPartner, c.opPartner)
	} else {
		m = c.computeModel()
	}
	return c.runModel(m)
}

// runModel is deadlock on the model m (the partners of its ops set): it adds
// the waits of the rules and of the model copies, runs the strict model and
// words a hang. It only reads c, so match may run it beside its own check.
func (c *checker) runModel(m *strict.Model) error {
	m = c.copiesModel(c.ruleModels(m))
	sim := strict.NewSimInto(c.sc.sim, m) // the Sim of the Check before, reused
	c.sc.sim = sim
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

// hostPos is where a host step sits in the strict model: its host index on
// its rank and the global id of the last comm op of its rank before it (-1
// when none).
type hostPos struct{ host, lastOp int32 }

// hostPositions returns the hostPos of the host steps idx (increasing
// indices) of rank r.
func (c *checker) hostPositions(m *strict.Model, r int, idx []int) []hostPos {
	out := make([]hostPos, len(idx))
	steps := c.p.Ranks[r]
	ops, i := int32(0), 0
	for n, at := range idx {
		for ; i < at; i++ {
			if steps[i].Kind.IsComm() {
				ops++
			}
		}
		last := int32(-1)
		if ops > 0 {
			last = m.OpOff[r] + ops - 1
		}
		out[n] = hostPos{int32(at) - ops, last}
	}
	return out
}

// withWaits returns a copy of m in which each host step h of extra (a
// global host id) also waits for extra[h] (the rendezvous steps: TIE_GRAD,
// ALL_REDUCE). m is not modified.
func withWaits(m *strict.Model, extra map[int32][]strict.Event) *strict.Model {
	n := 0
	for _, ws := range extra {
		n += len(ws)
	}
	out := *m
	out.WaitOff = make([]int32, len(m.WaitOff))
	out.Waits = make([]strict.Event, 0, len(m.Waits)+n)
	for h := range len(m.WaitOff) - 1 {
		out.Waits = append(out.Waits, m.Waits[m.WaitOff[h]:m.WaitOff[h+1]]...)
		out.Waits = append(out.Waits, extra[int32(h)]...)
		out.WaitOff[h+1] = int32(len(out.Waits))
	}
	return &out
}
