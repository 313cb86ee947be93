// Package synth constructs compute orders for given per-stage costs and a
// memory cap, beyond the fixed families (issue 14, item 3; docs/design.md
// §4, "Synthesized orders"). Schedule is a list scheduler: it runs the
// ranks in simulated time under the costs (the timing rules of gen/sim for
// a compute-only program: a step starts when its rank is free and its
// inputs have arrived, a cross-rank input Comm plus its transfer time
// after its producer ended), and whenever a rank is free it starts one of
// its ready steps by a priority Rule:
//
//   - an input-gradient backward I first (the critical path back; the
//     oldest micro-batch, then the later stage);
//   - else a forward F, if it keeps the rank's memory (the params of its
//     stages plus the activations of its live chunks) within the cap and,
//     on the first stage, keeps at most Rule.InFlight micro-batches in the
//     pipeline (F of stage 0 started, I of stage 0 not yet); which F by
//     Rule.Forward;
//   - else a weight-gradient W (the oldest), which frees its chunk's
//     activation; with Rule.EagerW a pending W goes before any F.
//
// Each stage runs its F's, I's and W's in micro-batch order. A chunk is
// live from the start of its F to the end of its W, as gen/sim counts live
// chunks, and on one rank the set of live chunks at each F depends on the
// rank's order alone, so an order that keeps within the cap here keeps
// within it however it is lowered and timed. A rule that leaves every rank
// waiting (memory full of chunks whose backwards need another chunk's F)
// fails with ErrStuck. Search tries a fixed list of rules (Rules) and
// keeps the best by the simulated makespan of the order; PriorityOrder is
// the same list scheduler (one engine, listsched.go) driven by a priority
// per step instead of a rule; Periodic times one micro-batch on a circle
// that every micro-batch repeats a period later (modulo scheduling),
// which packs a tight cap closer, and builds orders from it, unrolled and
// by PriorityOrder with the circle's times as priorities; Pilot improves
// such a priority order by rollouts (at each choice a rank has, the
// option whose completion by the priorities ends first); Anneal improves
// the priorities themselves (simulated annealing, each move rebuilt by
// the same list scheduler, so every move yields a feasible order); Reinsert
// improves an order itself, moving one step at a time on its rank where
// that is no slower (so a rank may idle with a step ready, which no list
// scheduler does); Exact searches
// every order of a small problem (branch and bound) and, when it
// finishes, proves its result optimal; Repair is a local
// search (adjacent swaps on a rank, within a count budget) from any order,
// a family's included, under a caller's evaluation. Everything is
// deterministic: no maps are iterated and nothing depends on wall time.
package synth

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// Problem is what an order is synthesized for.
type Problem struct {
	// Placement is the stages' placement: loop or v (one pipeline, every
	// micro-batch runs every stage).
	Placement ir.Placement
	Micro     int
	// Cost is the cost model of the placement's stages (per-stage F, I, W;
	// Comm, Act and BW for the cross-rank hops).
	Cost sim.Cost
	// Act is the memory a live chunk of each stage holds and Fixed the
	// memory each rank holds throughout (its stages' parameters), in one
	// unit; Cap bounds every rank's Fixed plus live activations (0: no
	// cap). A nil Act counts one unit per chunk.
	Act   []float64
	Fixed []float64
	Cap   float64
}

// BoundOptions is p's cap as sim.LowerBound takes it: each stage's act
// and each rank's cap less its fixed memory (none without a cap).
func (p Problem) BoundOptions() sim.BoundOptions {
	if !(p.Cap > 0) {
		return sim.BoundOptions{}
	}
	S, P := p.Placement.Stages(), p.Placement.Ranks()
	opt := sim.BoundOptions{Act: make([]float64, S), Cap: make([]float64, P)}
	for s := range S {
		opt.Act[s] = p.act(s)
	}
	for r := range P {
		opt.Cap[r] = max(p.Cap-p.fixed(r), 0)
	}
	return opt
}

// Forward is which ready forward a rank starts first.
type Forward uint8

const (
	// Oldest: the smallest micro-batch, then the later stage.
	Oldest Forward = iota
	// Deepest: the later stage, then the smaller micro-batch.
	Deepest
	// Shallowest: the earlier stage, then the smaller micro-batch.
	Shallowest
)

// Rule is one priority rule of the list scheduler.
type Rule struct {
	// InFlight bounds the micro-batches in the pipeline (0: no bound).
	InFlight int
	Forward  Forward
	// EagerW runs a pending W before any F (1F1B-like memory); otherwise W's
	// fill the time a rank would wait and make room under the cap.
	EagerW bool
	// Headroom admits a micro-batch to a rank (the F of the rank's first
	// stage) only while the cap also leaves room for one chunk of the
	// rank's largest later stage when none of them is live, so that the
	// oldest micro-batch the rank holds can take its next forward there.
	Headroom bool
	// Pace, when positive, spaces the micro-batches' entry: F(0, m) starts
	// no earlier than m · Pace · T, with T the busiest rank's work per
	// micro-batch (the steady state's period), so that chunks do not wait
	// in queues holding memory.
	Pace float64
}

func (r Rule) String() string {
	w := "fill"
	if r.EagerW {
		w = "eager"
	}
	return fmt.Sprintf("in-flight %d, forward %d, W %s, headroom %v, pace %g", r.InFlight, r.Forward, w, r.Headroom, r.Pace)
}

// ErrStuck is the failure of a rule that leaves every rank waiting.
var ErrStuck = errors.New("synth: the rule leaves every rank waiting (memory held by chunks whose backwards need another forward)")

const unset = -1.0

// check validates p and returns its resolved cost.
func (p *Problem) check() (sim.Cost, error) {
	S, P, M := p.Placement.Stages(), p.Placement.Ranks(), p.Micro
	if S < 1 || P < 1 || M < 1 {
		return sim.Cost{}, fmt.Errorf("synth: %d stages on %d ranks, %d micro-batches; want at least 1 each", S, P, M)
	}
	if err := ir.CheckSize(P, S, M); err != nil {
		return sim.Cost{}, fmt.Errorf("synth: %w", err)
	}
	c, err := p.Cost.Resolve(S)
	if err != nil {
		return sim.Cost{}, fmt.Errorf("synth: cost model: %w", err)
	}
	if p.Act != nil && len(p.Act) != S {
		return sim.Cost{}, fmt.Errorf("synth: %d activation sizes for %d stages", len(p.Act), S)
	}
	if p.Fixed != nil && len(p.Fixed) != P {
		return sim.Cost{}, fmt.Errorf("synth: %d fixed memories for %d ranks", len(p.Fixed), P)
	}
	for i, x := range append(slices.Clone(p.Act), p.Fixed...) {
		if !(x >= 0) || math.IsInf(x, 0) {
			return sim.Cost{}, fmt.Errorf("synth: memory size %g (entry %d of act, then fixed); want a finite size ≥ 0", x, i)
		}
	}
	for r := range P {
		if len(p.Placement.StagesOf(r)) == 0 {
			return sim.Cost{}, fmt.Errorf("synth: rank %d holds no stage; the placement must give every rank one", r)
		}
	}
	if p.Placement.RankOf == nil || len(p.Placement.RankOf) != S {
		return sim.Cost{}, fmt.Errorf("synth: placement without stages")
	}
	if !(p.Cap >= 0) || math.IsInf(p.Cap, 0) {
		return sim.Cost{}, fmt.Errorf("synth: memory cap %g; want 0 (none) or a finite cap", p.Cap)
	}
	if p.Cap > 0 {
		for r := range P {
			need := p.fixed(r)
			for _, s := range p.Placement.StagesOf(r) {
				need = max(need, p.fixed(r)+p.act(s))
			}
			if need > p.Cap*(1+1e-9) {
				return sim.Cost{}, fmt.Errorf("synth: rank %d needs %.4g to hold one chunk, over the memory cap %.4g", r, need, p.Cap)
			}
		}
	}
	return c, nil
}

func (p *Problem) act(s int) float64 {
	if p.Act == nil {
		return 1
	}
	return p.Act[s]
}

func (p *Problem) fixed(r int) float64 {
	if p.Fixed == nil {
		return 0
	}
	return p.Fixed[r]
}

// hopTime is the latency of an input from stage from to stage to that
// carries stage actStage's activation (or its gradient): 0 on one rank,
// else Cost.Comm plus the transfer time, as gen/sim times it.
func hopTime(pl ir.Placement, c sim.Cost, from, to, actStage int) float64 {
	if pl.RankOf[from] == pl.RankOf[to] {
		return 0
	}
	return c.Comm + c.ActTime(actStage)
}

func at(l []float64, s int) float64 {
	if len(l) == 1 {
		return l[0]
	}
	return l[s]
}

// Schedule returns the compute order the list scheduler builds for p under
// rule: F, I and W steps on every rank (ir.Program, like a family's
// Build), or ErrStuck.
func Schedule(p Problem, rule Rule) (ir.Program, error) {
	c, err := p.check()
	if err != nil {
		return ir.Program{}, err
	}
	pl := p.Placement
	P := pl.Ranks()
	work := make([]float64, P) // each rank's work per micro-batch
	for s, r := range pl.RankOf {
		work[r] += at(c.F, s) + at(c.I, s) + at(c.W, s)
	}
	period := 0.0
	for _, w := range work {
		period = max(period, w*rule.Pace)
	}
	rs := &ruleState{rule: rule, l: newLister(&p, c, func(m int) float64 { return float64(m) * period }),
		room: make([]float64, P), later: make([]int, P), pendW: make([][]ir.Step, P)}
	for s, r := range pl.RankOf {
		if s != rs.l.stagesOf[r][0] {
			rs.room[r] = max(rs.room[r], p.act(s))
		}
	}
	l := rs.l
	for !l.done() {
		for progressed := true; progressed; {
			progressed = false
			for r := range P {
				for l.isFree(r) {
					st, ok := rs.pick(r, l.t)
					if !ok {
						break
					}
					progressed = true
					rs.commit(r, st)
					l.start(r, st)
				}
			}
		}
		if err := l.advance(); err != nil {
			return ir.Program{}, err
		}
	}
	return l.out, nil
}

// ruleState is Schedule's state beside the engine's.
type ruleState struct {
	rule     Rule
	l        *lister
	room     []float64   // the largest chunk of each rank's later stages
	later    []int       // live chunks of them
	pendW    [][]ir.Step // W's whose I ran, oldest first
	inFlight int         // micro-batches past the first F, not yet past the first I
}

// commit keeps the rule's state for st, which rank r starts.
func (rs *ruleState) commit(r int, st ir.Step) {
	first := rs.l.stagesOf[r][0]
	switch st.Kind {
	case ir.Forward:
		if st.Stage != first {
			rs.later[r]++
		}
		if st.Stage == 0 {
			rs.inFlight++
		}
	case ir.BackwardInput:
		rs.pendW[r] = append(rs.pendW[r], ir.Compute(ir.BackwardWeight, st.Stage, st.Micro))
		if st.Stage == 0 {
			rs.inFlight--
		}
	case ir.BackwardWeight:
		rs.pendW[r] = rs.pendW[r][1:]
		if st.Stage != first {
			rs.later[r]--
		}
	}
}

// pick chooses the step rank r starts at t, if any.
func (rs *ruleState) pick(r int, t float64) (ir.Step, bool) {
	const eps = listEps
	l, rule, pendW := rs.l, &rs.rule, rs.pendW[r]
	stages, nf, ni := l.stagesOf[r], l.nf, l.ni
	ready := func(x float64) bool { return x != unset && x <= t+eps }
	// I: the oldest micro-batch, then the later stage.
	bi := -1
	for _, s := range stages {
		if ready(l.readyI(s)) && (bi < 0 || ni[s] < ni[bi] || (ni[s] == ni[bi] && s > bi)) {
			bi = s
		}
	}
	if bi >= 0 {
		return ir.Compute(ir.BackwardInput, bi, ni[bi]), true
	}
	if rule.EagerW && len(pendW) > 0 {
		return pendW[0], true
	}
	bf := -1
	better := func(s, b int) bool {
		switch rule.Forward {
		case Deepest:
			return s > b || (s == b && nf[s] < nf[b])
		case Shallowest:
			return s < b
		}
		return nf[s] < nf[b] || (nf[s] == nf[b] && s > b)
	}
	for _, s := range stages {
		if !ready(l.readyF(s)) || !rs.capOK(r, s) {
			continue
		}
		if s == 0 && rule.InFlight > 0 && rs.inFlight >= rule.InFlight {
			continue
		}
		if bf < 0 || better(s, bf) {
			bf = s
		}
	}
	if bf >= 0 {
		return ir.Compute(ir.Forward, bf, nf[bf]), true
	}
	if len(pendW) > 0 {
		return pendW[0], true
	}
	return ir.Step{}, false
}

// capOK reports whether a chunk of stage s may start on rank r: within
// the cap, and with Rule.Headroom, on the rank's first stage while none of
// its later stages' chunks is live, with room left for one of them.
func (rs *ruleState) capOK(r, s int) bool {
	if rs.rule.Headroom && s == rs.l.stagesOf[r][0] && rs.later[r] == 0 {
		return rs.l.fits(r, s, rs.room[r])
	}
	return rs.l.fits(r, s, 0)
}
