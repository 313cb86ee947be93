// Package partition splits a model's layers (gen/model) into the contiguous
// stages of a schedule so that the schedule's simulated makespan is
// smallest, within a per-rank memory limit (`ppgen partition`,
// `-partition auto`; docs/model.md).
//
// Balancing the stages' sums is not enough: the first stage's embedding and
// the last stage's head and loss sit at the two ends of the pipeline's
// critical chain, and where a family puts its warm-up and drain decides how
// much an uneven stage costs. So Search judges splits by the simulated
// makespan of the schedule's own order (gen/sim): when the splits number
// at most its budget of simulations it tries every one (the exact optimum
// for that order); otherwise it starts from the even split (by layer count)
// and from the split that minimises the largest stage (binary search on the
// bottleneck, exact for contiguous splits) and moves stage boundaries by one
// layer while the makespan improves. Deterministic, and never worse than
// the even split.
//
// Memory is counted per rank in the model's units (Memory): the peak over
// the iteration of the activations its live chunks hold (a chunk of a stage
// holds the act of every layer of the stage, from the start of its forward
// to the end of its last backward, as gen/sim counts live chunks) plus the
// params of the stages it holds.
//
// Placed is the split for an order not built yet (auto's synthesized
// candidates): it weighs the ranks' work and their chunks' activation-time
// by sums alone.
package partition

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/pricing"
	"github.com/ppgen/ppgen/gen/sim"
)

// Options are what Search optimises under.
type Options struct {
	// Cost turns a split of one model copy's layers into the cost model of
	// all the program's stages; nil: the model's own (pricing.OfModel).
	Cost func(model.Partition) (sim.Cost, error)
	// MemLimit bounds every rank's peak memory (Memory), in the model's
	// units; 0: no limit.
	MemLimit float64
	// MaxEvals bounds the simulations of one search (0: DefaultMaxEvals).
	MaxEvals int
	// Program, when not nil, turns the program searched for into the one
	// a split runs (its RECOMPUTE steps and their shares, which the split
	// decides under -recompute model), to simulate and measure in its
	// place.
	Program func(ir.Program, model.Partition) (ir.Program, error)
}

// DefaultMaxEvals is the number of splits one Search simulates at most.
const DefaultMaxEvals = 150

// Eval is what one split costs one program.
type Eval struct {
	Makespan float64
	// Mem is the busiest rank's peak memory (Memory), MemPerRank each
	// rank's.
	Mem        float64
	MemPerRank []float64
}

// Result is a Search's outcome: the best split found and the even split,
// each with its evaluation.
type Result struct {
	Split    model.Partition
	Eval     Eval
	Even     model.Partition
	EvenEval Eval
	// Evals is the number of splits simulated.
	Evals int
}

// Copies is the number of model copies p's stages form (1 for one
// pipeline; dualpipe's 2, each holding the whole model).
func Copies(p ir.Program) int { return max(p.Copies, 1) }

// StageMemory returns, for every stage of a program of copies copies split
// by part, the activation a live chunk holds (the sum of its layers' act)
// and its parameters (the sum of their params).
func StageMemory(m model.Model, part model.Partition, copies int) (act, params []float64, err error) {
	if err := part.Check(len(m.Layers)); err != nil {
		return nil, nil, err
	}
	n := part.Stages()
	act, params = make([]float64, n), make([]float64, n)
	for s := range n {
		for _, l := range m.Layers[part.Bounds[s]:part.Bounds[s+1]] {
			act[s] += l.Act
			params[s] += l.Params
		}
	}
	copies = max(copies, 1)
	return slices.Repeat(act, copies), slices.Repeat(params, copies), nil
}

// Memory returns each rank's peak memory when p, its stages split by part,
// ran as r: the peak of its live chunks' activations (sim.Result.PeakMemory
// of StageMemory's act) plus the params of the stages placed on it.
func Memory(m model.Model, part model.Partition, p ir.Program, r sim.Result) ([]float64, error) {
	act, params, err := StageMemory(m, part, Copies(p))
	if err != nil {
		return nil, err
	}
	if len(act) != p.Stages() {
		return nil, fmt.Errorf("partition: %d stages of %d copies, but the program has %d stages", part.Stages(), Copies(p), p.Stages())
	}
	mem := r.PeakMemory(act)
	for s, rk := range p.Placement.RankOf {
		if rk >= 0 && rk < len(mem) {
			mem[rk] += params[s]
		}
	}
	return mem, nil
}

// Evaluate simulates p with its stages split by part under opt.Cost and
// measures its memory.
func Evaluate(m model.Model, part model.Partition, p ir.Program, opt Options) (Eval, error) {
	return evaluate(m, part, p, opt, true)
}

// evaluate is Evaluate, measuring the memory only when mem is set.
func evaluate(m model.Model, part model.Partition, p ir.Program, opt Options, mem bool) (Eval, error) {
	costOf := opt.Cost
	if costOf == nil {
		costOf = func(part model.Partition) (sim.Cost, error) { return pricing.OfModel(m).Split(part, Copies(p)) }
	}
	c, err := costOf(part)
	if err != nil {
		return Eval{}, err
	}
	if opt.Program != nil {
		if p, err = opt.Program(p, part); err != nil {
			return Eval{}, err
		}
	}
	r, err := sim.Run(p, c)
	if err != nil {
		return Eval{}, err
	}
	if !mem {
		return Eval{Makespan: r.Makespan}, nil
	}
	perRank, err := Memory(m, part, p, r)
	if err != nil {
		return Eval{}, err
	}
	return Eval{Makespan: r.Makespan, Mem: slices.Max(perRank), MemPerRank: perRank}, nil
}

// Balanced splits the layers of m into n contiguous stages so that the
// largest stage's F + I + W is smallest (binary search on that bottleneck,
// each probe a greedy pass from the first layer; later stages take a layer
// each when the layers left would not otherwise fill them).
func Balanced(m model.Model, n int) (model.Partition, error) {
	L := len(m.Layers)
	if n < 1 || n > L {
		return model.Even(L, n) // its error
	}
	w := make([]float64, L)
	lo, hi := 0.0, 0.0
	for i, l := range m.Layers {
		w[i] = l.F + l.I + l.W
		lo, hi = max(lo, w[i]), hi+w[i]
	}
	cut := func(limit float64) []int {
		b := []int{0}
		sum := 0.0
		for i := range L {
			if i > b[len(b)-1] && len(b) < n && (sum+w[i] > limit || L-i == n-len(b)) {
				b, sum = append(b, i), 0
			}
			sum += w[i]
		}
		return append(b, L)
	}
	fits := func(limit float64) bool {
		b := cut(limit)
		for s := 1; s < len(b); s++ {
			sum := 0.0
			for _, x := range w[b[s-1]:b[s]] {
				sum += x
			}
			if sum > limit*(1+1e-12) {
				return false
			}
		}
		return true
	}
	for range 100 {
		if hi-lo <= 1e-9*max(1, hi) {
			break
		}
		mid := (lo + hi) / 2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	p := model.Partition{Bounds: cut(hi)}
	return p, p.Check(L)
}

// NoFitError is Search's refusal when no split it tried fits the memory
// limit: Least is the smallest per-rank peak its search for the least
// memory reached (with Split), the limit to ask for instead.
type NoFitError struct {
	Limit, Least float64
	Split        model.Partition
	Names        string // Split's stages by layer names
}

func (e *NoFitError) Error() string {
	return fmt.Sprintf("partition: no split fits the memory limit %.4g per rank: the smallest peak found is %.4g (stages %s); raise -mem to at least %.4g, or use a schedule that keeps fewer micro-batches live",
		e.Limit, e.Least, e.Names, e.Least)
}

// Search returns the split of m's layers into the stages of p (one split
// per model copy, Copies) that gives p's order the smallest simulated
// makespan among those it visits, within opt.MemLimit, ordered by the
// memory over the limit first, then the makespan, then the sum of squared
// stage costs: every split when they number at most opt.MaxEvals, else the
// even split, the Balanced split, and the local moves from the better of
// them (descend), taken while they improve, at most opt.MaxEvals
// simulations. It fails with a *NoFitError when no split it
// tried fits the limit.
func Search(m model.Model, p ir.Program, opt Options) (Result, error) {
	copies := Copies(p)
	S := p.Stages()
	if S%copies != 0 {
		return Result{}, fmt.Errorf("partition: %d stages do not form %d model copies", S, copies)
	}
	n := S / copies
	even, err := model.Even(len(m.Layers), n)
	if err != nil {
		return Result{}, err
	}
	if !(opt.MemLimit >= 0) || math.IsInf(opt.MemLimit, 0) {
		return Result{}, fmt.Errorf("partition: memory limit %g; want 0 (none) or a finite limit", opt.MemLimit)
	}
	budget := opt.MaxEvals
	if budget <= 0 {
		budget = DefaultMaxEvals
	}
	s := &search{m: m, p: p, opt: opt, budget: budget, seen: map[string]*point{}}
	ev, err := s.eval(even.Bounds)
	if err != nil {
		return Result{}, err
	}
	res := Result{Even: even}
	bal, err := Balanced(m, n)
	if err != nil {
		return Result{}, err
	}
	starts := [][]int{even.Bounds, bal.Bounds}
	find := func(less func(a, b *point) bool, starts [][]int) (*point, error) {
		if splits(len(m.Layers), n, budget) <= budget {
			s.budget = s.evals + budget // every split fits the budget: the exact optimum
			return s.exhaustive(len(m.Layers), n, less)
		}
		return s.descend(starts, less)
	}
	best, err := find(s.less, starts)
	if err != nil {
		return Result{}, err
	}
	if opt.MemLimit > 0 && best.Mem > opt.MemLimit*(1+1e-9) {
		// The least memory the same moves reach, for the error.
		s.budget += budget
		least, err := find(func(a, b *point) bool {
			if !near(a.Mem, b.Mem) {
				return a.Mem < b.Mem
			}
			return s.less(a, b)
		}, append(starts, best.bounds))
		if err != nil {
			return Result{}, err
		}
		if least.Mem > opt.MemLimit*(1+1e-9) {
			part := model.Partition{Bounds: least.bounds}
			return Result{}, &NoFitError{Limit: opt.MemLimit, Least: least.Mem, Split: part, Names: Names(m, part)}
		}
		// A split that fits: the fastest near it.
		s.budget += budget
		if best, err = s.descend([][]int{least.bounds}, s.less); err != nil {
			return Result{}, err
		}
	}
	res.Split, res.Eval, res.Evals = model.Partition{Bounds: best.bounds}, best.Eval, s.evals
	res.EvenEval = ev.Eval
	if opt.MemLimit == 0 {
		// The memory of the two splits returned.
		if res.Eval, err = Evaluate(m, res.Split, p, opt); err != nil {
			return Result{}, err
		}
		if res.EvenEval, err = Evaluate(m, even, p, opt); err != nil {
			return Result{}, err
		}
	}
	return res, nil
}

// point is one evaluated split.
type point struct {
	Eval
	bounds []int
	over   float64 // memory over the limit
	spread float64 // the sum of squared stage costs
}

type search struct {
	m      model.Model
	p      ir.Program
	opt    Options
	budget int
	evals  int
	seen   map[string]*point
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(a), math.Abs(b)) }

// less orders points: memory over the limit, makespan, spread, bounds.
func (s *search) less(a, b *point) bool {
	switch {
	case !near(a.over, b.over):
		return a.over < b.over
	case !near(a.Makespan, b.Makespan):
		return a.Makespan < b.Makespan
	case !near(a.spread, b.spread):
		return a.spread < b.spread
	}
	return slices.Compare(a.bounds, b.bounds) < 0
}

var errBudget = errors.New("partition: simulation budget spent")

func (s *search) eval(bounds []int) (*point, error) {
	key := fmt.Sprint(bounds)
	if pt, ok := s.seen[key]; ok {
		return pt, nil
	}
	if s.evals >= s.budget {
		return nil, errBudget
	}
	s.evals++
	part := model.Partition{Bounds: slices.Clone(bounds)}
	// Without a limit the memory decides nothing: Search measures it for
	// the splits it returns only.
	ev, err := evaluate(s.m, part, s.p, s.opt, s.opt.MemLimit > 0)
	if err != nil {
		return nil, err
	}
	pt := &point{Eval: ev, bounds: part.Bounds}
	if s.opt.MemLimit > 0 {
		pt.over = max(0, ev.Mem-s.opt.MemLimit)
	}
	for st := range part.Stages() {
		c := 0.0
		for _, l := range s.m.Layers[part.Bounds[st]:part.Bounds[st+1]] {
			c += l.F + l.I + l.W
		}
		pt.spread += c * c
	}
	s.seen[key] = pt
	return pt, nil
}

// descend takes the best of the starts by less, then the first improving
// move until none improves or the budget is spent. A move shifts a run of
// consecutive boundaries by one layer (moving one layer from the stage
// before the run to the stage after it, or back): single boundaries first,
// then longer runs; -1 before +1.
func (s *search) descend(starts [][]int, less func(a, b *point) bool) (*point, error) {
	var best *point
	for _, b := range starts {
		pt, err := s.eval(b)
		if err == errBudget {
			break
		}
		if err != nil {
			return nil, err
		}
		if best == nil || less(pt, best) {
			best = pt
		}
	}
	if best == nil {
		return nil, errBudget
	}
	n := len(best.bounds) - 1 // stages
	try := func(b []int) (bool, error) {
		pt, err := s.eval(b)
		if err != nil {
			return false, err
		}
		if less(pt, best) {
			best = pt
			return true, nil
		}
		return false, nil
	}
	for {
		ok, err := s.improve(best.bounds, n, try)
		if err == errBudget {
			return best, nil
		}
		if err != nil {
			return nil, err
		}
		if !ok {
			return best, nil
		}
	}
}

// improve tries the moves from bounds in order and stops at the first that
// try accepts: runs of consecutive boundaries shifted by one layer (single
// boundaries first, then longer runs; -1 before +1), then two boundaries
// moved by one layer each.
func (s *search) improve(bounds []int, n int, try func([]int) (bool, error)) (bool, error) {
	valid := func(b []int) bool {
		for i := 1; i < len(b); i++ {
			if b[i] <= b[i-1] {
				return false
			}
		}
		return true
	}
	for span := 1; span < n; span++ {
		for i := 1; i+span <= n; i++ {
			for _, d := range []int{-1, +1} {
				b := slices.Clone(bounds)
				for j := i; j < i+span; j++ {
					b[j] += d
				}
				if !valid(b) {
					continue
				}
				if ok, err := try(b); ok || err != nil {
					return ok, err
				}
			}
		}
	}
	for i := 1; i < n; i++ {
		for j := i + 1; j < n; j++ {
			for _, d := range [][2]int{{-1, -1}, {-1, 1}, {1, -1}, {1, 1}} {
				b := slices.Clone(bounds)
				b[i] += d[0]
				b[j] += d[1]
				if !valid(b) {
					continue
				}
				if ok, err := try(b); ok || err != nil {
					return ok, err
				}
			}
		}
	}
	return false, nil
}

// exhaustive evaluates every split of L layers into n stages, in
// lexicographic order, and returns the best by less.
func (s *search) exhaustive(L, n int, less func(a, b *point) bool) (*point, error) {
	var best *point
	b := make([]int, n+1)
	var rec func(k int) error
	rec = func(k int) error {
		if k == n {
			b[n] = L
			pt, err := s.eval(b)
			if err != nil {
				return err
			}
			if best == nil || less(pt, best) {
				best = pt
			}
			return nil
		}
		for x := b[k-1] + 1; x <= L-(n-k); x++ {
			b[k] = x
			if err := rec(k + 1); err != nil {
				return err
			}
		}
		return nil
	}
	return best, rec(1)
}

// splits is the number of splits of L layers into n stages, C(L−1, n−1),
// or limit+1 when it is over limit.
func splits(L, n, limit int) int {
	k, N := n-1, L-1
	k = min(k, N-k)
	c := 1
	for i := 1; i <= k; i++ {
		c = c * (N - k + i) / i
		if c > limit {
			return limit + 1
		}
	}
	return c
}

// Names writes a split's stages by their layers' names: "embed..block6
// block7..head"; a layer without a name is its index.
func Names(m model.Model, part model.Partition) string {
	var parts []string
	for s := range part.Stages() {
		parts = append(parts, Range(m, part.Bounds[s], part.Bounds[s+1]))
	}
	return strings.Join(parts, " ")
}

// Range names the layers first..end-1 of m: "block3", or "block3..block7".
func Range(m model.Model, first, end int) string {
	name := func(i int) string {
		if i < 0 || i >= len(m.Layers) {
			return fmt.Sprint(i)
		}
		if n := m.Layers[i].Name; n != "" {
			return n
		}
		return fmt.Sprint(i)
	}
	if end-first <= 1 {
		return name(first)
	}
	return name(first) + ".." + name(end-1)
}
