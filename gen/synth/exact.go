package synth

import (
	"math"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// Optimum is Exact's result.
type Optimum struct {
	// Program is the fastest order found that beats the caller's upper
	// bound, Makespan its simulated makespan; Program.Ranks is nil when
	// none was found.
	Program  ir.Program
	Makespan float64
	// Proved is true when the search ran to its end: no order of the
	// problem's steps is faster than Makespan (or than the caller's upper
	// bound when Program.Ranks is nil).
	Proved bool
	// Nodes is the number of search nodes visited.
	Nodes int
}

// ExactMaxSteps is the most steps (3 · stages · micro-batches) a problem
// given to Exact may have; larger ones are refused with ok false: the
// search grows exponentially with them.
const ExactMaxSteps = 1 << 12

// Exact searches every order of p's F, I and W steps (branch and bound)
// for one faster than ub (0 or less: any), visiting at most nodes search
// nodes. Every order is timed as gen/sim times a compute-only program:
// each rank runs its steps in its order, each as soon as its rank is free
// and its input has arrived (Cost.Comm plus the transfer time after its
// producer's end between ranks); memory is each rank's Fixed plus the act
// of its live chunks (from an F's start to its W's end), which depends on
// the rank's order alone.
//
// The search is complete over the orders, with two reductions that lose
// no makespan (docs/design.md §4, "Exact orders"). Micro-batches are
// identical (costs depend on the stage only), so the steps of one kind
// and stage may be taken in micro-batch order: relabelling the k-th to
// start as micro-batch k keeps every dependency (the k-th F of stage s+1
// starts after k F's of stage s have ended, the k-th among them
// included) and every rank's memory (the live chunks of a stage are the
// F's started less the W's ended). And each order is built in one
// sequence: the steps by start time, steps with equal starts on
// different ranks, neither the other's input, by index. A node's lower
// bound is the largest of each rank's remaining work after it is free (and
// after the last start) and, for each next step, its earliest start plus
// the chain that must follow it. Proved is false when the node budget
// runs out first; the result is then the best order found.
func Exact(p Problem, nodes int, ub float64) (Optimum, bool, error) {
	c, err := p.check()
	if err != nil {
		return Optimum{}, false, err
	}
	pl, M := p.Placement, p.Micro
	S, P := pl.Stages(), pl.Ranks()
	if 3*S*M > ExactMaxSteps {
		return Optimum{}, false, nil
	}
	e := newExact(p, c)
	if !(ub > 0) {
		ub = math.Inf(1)
	}
	e.best, e.budget = ub, nodes
	e.dfs(3*S*M, 0, 0, -1)
	out := Optimum{Proved: !e.stopped, Nodes: e.nodes}
	if e.found != nil {
		q := ir.Program{Placement: pl, Micro: M, Ranks: make([][]ir.Step, P)}
		for _, i := range e.found {
			k, s, m := e.decode(i)
			q.Ranks[pl.RankOf[s]] = append(q.Ranks[pl.RankOf[s]], ir.Compute(circleKinds[k], s, m))
		}
		r, err := sim.Run(q, c)
		if err != nil {
			return Optimum{}, false, err
		}
		out.Program, out.Makespan = q, r.Makespan
	}
	return out, true, nil
}

type exact struct {
	S, M      int
	rank      []int        // per stage
	dur       [3][]float64 // per kind and stage
	hopIn     [3][]float64 // the latency from the step's input, per kind and stage
	tail      [3][]float64 // the chain from a step's start to the end of all that must follow it
	act       []float64
	cap       float64
	next      [3][]int // the next micro-batch of each kind and stage
	end       [3][]float64
	free, mem []float64
	remain    []float64
	seq       []int // the steps taken, in order
	found     []int
	best      float64
	nodes     int
	budget    int
	stopped   bool
}

func newExact(p Problem, c sim.Cost) *exact {
	pl, M := p.Placement, p.Micro
	S, P := pl.Stages(), pl.Ranks()
	e := &exact{S: S, M: M, rank: pl.RankOf, act: make([]float64, S), cap: p.Cap,
		free: make([]float64, P), mem: make([]float64, P), remain: make([]float64, P)}
	for k := range 3 {
		e.dur[k], e.hopIn[k], e.tail[k] = make([]float64, S), make([]float64, S), make([]float64, S)
		e.next[k], e.end[k] = make([]int, S), make([]float64, S*M)
	}
	hop := func(a, b, actStage int) float64 { return hopTime(pl, c, a, b, actStage) }
	for s := range S {
		e.dur[0][s], e.dur[1][s], e.dur[2][s] = at(c.F, s), at(c.I, s), at(c.W, s)
		e.act[s] = p.act(s)
		if s > 0 {
			e.hopIn[0][s] = hop(s-1, s, s-1)
		}
		if s+1 < S {
			e.hopIn[1][s] = hop(s+1, s, s)
		}
		e.remain[pl.RankOf[s]] += float64(M) * (e.dur[0][s] + e.dur[1][s] + e.dur[2][s])
	}
	for r := range P {
		e.mem[r] = p.fixed(r)
	}
	for s := range S {
		e.tail[2][s] = e.dur[2][s]
	}
	for s := range S { // I from stage 0 up
		t := e.dur[2][s]
		if s > 0 {
			t = max(t, e.hopIn[1][s-1]+e.tail[1][s-1])
		}
		e.tail[1][s] = e.dur[1][s] + t
	}
	for s := S - 1; s >= 0; s-- {
		if s == S-1 {
			e.tail[0][s] = e.dur[0][s] + e.tail[1][s]
		} else {
			e.tail[0][s] = e.dur[0][s] + e.hopIn[0][s+1] + e.tail[0][s+1]
		}
	}
	return e
}

func (e *exact) index(k, s, m int) int { return (k*e.S+s)*e.M + m }

func (e *exact) decode(i int) (k, s, m int) {
	return i / (e.S * e.M), i / e.M % e.S, i % e.M
}

// input returns the step (k, s, m) waits for (its kind, stage) and
// whether it has one.
func (e *exact) input(k, s int) (int, int, bool) {
	switch {
	case k == 0 && s > 0:
		return 0, s - 1, true
	case k == 1 && s == e.S-1:
		return 0, s, true
	case k == 1:
		return 1, s + 1, true
	case k == 2:
		return 1, s, true
	}
	return 0, 0, false
}

// ready returns the earliest start of the next step of kind k and stage s
// and whether it may be taken now.
func (e *exact) ready(k, s int) (float64, bool) {
	m := e.next[k][s]
	if m >= e.M {
		return 0, false
	}
	t := e.free[e.rank[s]]
	if ik, is, ok := e.input(k, s); ok {
		if e.next[ik][is] <= m {
			return 0, false
		}
		t = max(t, e.end[ik][is*e.M+m]+e.hopIn[k][s])
	}
	if k == 0 && e.cap > 0 && e.mem[e.rank[s]]+e.act[s] > e.cap*(1+1e-9) {
		return 0, false
	}
	return t, true
}

type exactMove struct {
	k, s int
	t    float64
}

func (e *exact) dfs(left int, ms, last float64, lastI int) {
	e.nodes++
	if e.nodes > e.budget {
		e.stopped = true
	}
	if e.stopped {
		return
	}
	if left == 0 {
		if ms < e.best*(1-1e-9) {
			e.best, e.found = ms, slices.Clone(e.seq)
		}
		return
	}
	lb := ms
	for r, f := range e.free {
		lb = max(lb, max(f, last)+e.remain[r])
	}
	var moves []exactMove
	for k := range 3 {
		for s := range e.S {
			t, ok := e.ready(k, s)
			if !ok {
				continue
			}
			lb = max(lb, max(t, last)+e.tail[k][s])
			if t < last-1e-9 {
				continue // it would start before the last step taken: the order is built by start
			}
			if math.Abs(t-last) <= 1e-9 && lastI >= 0 {
				i := e.index(k, s, e.next[k][s])
				lk, ls, lm := e.decode(lastI)
				ik, is, hasIn := e.input(k, s)
				dependent := hasIn && ik == lk && is == ls && lm == e.next[k][s]
				if i < lastI && e.rank[s] != e.rank[ls] && !dependent {
					continue // equal starts on different ranks: by index
				}
			}
			moves = append(moves, exactMove{k, s, t})
		}
	}
	if lb >= e.best*(1-1e-9) || len(moves) == 0 {
		return
	}
	slices.SortStableFunc(moves, func(a, b exactMove) int {
		switch {
		case a.t < b.t:
			return -1
		case a.t > b.t:
			return 1
		}
		return 0
	})
	for _, mv := range moves {
		k, s := mv.k, mv.s
		r, m := e.rank[s], e.next[k][s]
		d := e.dur[k][s]
		oldFree := e.free[r]
		e.end[k][s*e.M+m] = mv.t + d
		e.free[r] = mv.t + d
		e.remain[r] -= d
		switch k {
		case 0:
			e.mem[r] += e.act[s]
		case 2:
			e.mem[r] -= e.act[s]
		}
		e.next[k][s]++
		e.seq = append(e.seq, e.index(k, s, m))
		e.dfs(left-1, max(ms, mv.t+d), mv.t, e.index(k, s, m))
		e.seq = e.seq[:len(e.seq)-1]
		e.next[k][s]--
		switch k {
		case 0:
			e.mem[r] -= e.act[s]
		case 2:
			e.mem[r] += e.act[s]
		}
		e.remain[r] += d
		e.free[r] = oldFree
		if e.stopped {
			return
		}
	}
}
