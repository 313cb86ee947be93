package auto

import (
	"cmp"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/synth"
)

// SynthPrefix starts the Schedule name of a candidate the auto scheduler
// synthesized (gen/synth) rather than took from a family: "synth(loop)"
// (V = 1, 2 or 4), "synth(v)", "synth(zigzag)" (V = 4 or 8, ir.Zigzag)
// and "synth(balanced)" (one of those with stages moved between ranks:
// balancePlan). Such a Config does not rebuild with Build: its order is
// the candidate's own (Result.Compute), on its own placement.
const SynthPrefix = "synth("

// IsSynthesized reports whether a schedule name is a synthesized
// candidate's.
func IsSynthesized(schedule string) bool { return strings.HasPrefix(schedule, SynthPrefix) }

// synthPlacements are the placements the auto scheduler synthesizes on:
// loop with V = 1, 2, 4, v, and the zigzag with V = 4 and 8 (ir.Zigzag:
// legs down and up the ranks; under a tight memory cap its smaller chunks
// pack the cap closer than v's: the W = 0.6·I model at P = 4, M = 8 within
// two micro-batches, 215.8 at V = 8 against v-min's 234.4).
var synthPlacements = []synthPlacement{
	{"synth(loop)", 1, false},
	{"synth(loop)", 2, false},
	{"synth(v)", 2, true}, // ir.Zigzag(P, 2) is the v shape
	{"synth(loop)", 4, false},
	{"synth(zigzag)", 4, true},
	{"synth(zigzag)", 8, true},
}

// A synthPlacement is a placement auto synthesizes on: the candidate's
// name, its V, and whether it is ir.Zigzag (else ir.Loop).
type synthPlacement struct {
	name    string
	virtual int
	zigzag  bool
}

// placement returns the placement on P ranks.
func (pk synthPlacement) placement(P int) ir.Placement {
	if pk.zigzag {
		return ir.Zigzag(P, pk.virtual)
	}
	return ir.Loop(P, pk.virtual)
}

// synthPlacementsFor returns the synthPlacements whose stages a model
// of L layers fills and whose V is cfg's (when cfg gives one).
func synthPlacementsFor(cfg ir.Config, L int) []synthPlacement {
	var out []synthPlacement
	for _, pk := range synthPlacements {
		if cfg.Ranks*pk.virtual <= L && (cfg.Virtual == 0 || cfg.Virtual == pk.virtual) {
			out = append(out, pk)
		}
	}
	return out
}

// synthTries returns the candidates gen/synth builds for a model
// description (Options.Split) on each placement of on
// (synthPlacementsFor), calling progress before each: for each, the list
// scheduler's best order (synth.Search over synth.Rules) for the even
// split, for the split of the family candidate with the smallest bound
// on the same placement (the best family's start) and, with -partition
// auto under a limit, for partition.Placed's split (the LLM-like model at
// P = 4, M = 8 within two micro-batches: 269.3 on the zigzag with V = 8,
// where the even and the families' splits gave 283.6 at best), then, with
// -partition auto, the best order again for gen/partition's split of the
// best order found; with -partition auto, a placement balancePlan derives
// from the fastest joins them (synth(balanced)). Each try carries its order, split and bound (the order's
// simulated makespan and memory), as the families' tries do; its index
// follows theirs, so a family wins a tie. Synthesis failures (every rule
// stuck) leave the placement out.
func synthTries(cfg ir.Config, opt Options, sp *SplitModel, on []synthPlacement, limit float64, fams []*autoTry, index int, progress func(format string, args ...any)) ([]*autoTry, error) {
	L := len(sp.Model.Layers)
	var out []*autoTry
	// Judged by the lowered program's simulation, what auto compares (an
	// order that is shorter as a compute order alone may be longer once
	// its transfers are placed).
	lowered := func(q ir.Program, part model.Partition) (synth.Score, bool) {
		// The local search compares orders laid out for the model (one
		// lowering per step: latency included when transfers take time,
		// which finds faster orders then, e.g. the LLM-like model with
		// comm = 1 at P = 8, M = 16 within 18.5: 450.6 → 439.6); the
		// candidate found is lowered every way at the end (evaluateSynth).
		o := sp.lowerOptions(opt.Options, part)
		po := o.Passes
		if ls, _ := gen.CostLayouts(q, o); len(ls) > 0 {
			po = ls[len(ls)-1] // the latency-aware layout when there is one
		}
		low, _, err := passes.Lower(q, po)
		if err != nil {
			return synth.Score{}, false
		}
		r, mem, err := sp.run(low, part)
		if err != nil || (limit > 0 && mem > limit*(1+1e-9)) {
			return synth.Score{}, false
		}
		return synth.Score{Makespan: r.Makespan, Finish: synth.RankFinish(r)}, true
	}
	var plans []*plan
	for _, pk := range on {
		progress("synthesizing %s V=%d", pk.name, pk.virtual)
		pl := pk.placement(cfg.Ranks)
		even, err := model.Even(L, pl.Stages())
		if err != nil {
			return nil, err
		}
		starts := []model.Partition{even}
		var from *autoTry // the family try with the least bound on pl
		for _, t := range fams {
			if t.err != nil || t.built.Copies > 1 || !slices.Equal(t.built.Placement.RankOf, pl.RankOf) || (limit > 0 && t.boundMem > limit*(1+1e-9)) {
				continue
			}
			if from == nil || t.bound < from.bound {
				from = t
			}
		}
		if from != nil && from.layers.Bounds != nil && !slices.Equal(from.layers.Bounds, even.Bounds) {
			starts = append(starts, from.layers)
		}
		if limit > 0 && sp.Partition {
			// Under a cap, also the split that balances the ranks and
			// then their chunks' activation-time (partition.Placed).
			if pp, err := partition.Placed(sp.Model, pl); err == nil && !slices.ContainsFunc(starts, func(q model.Partition) bool { return slices.Equal(q.Bounds, pp.Bounds) }) {
				starts = append(starts, pp)
			}
		}
		var best *synthFound
		for _, part := range starts {
			f, err := synthesize(cfg, sp, pl, part, limit)
			if err != nil {
				return nil, err
			}
			if f != nil && (best == nil || f.ms < best.ms) {
				best = f
			}
		}
		if best != nil && sp.Partition {
			// The split for the order found, then the order for that split.
			if pr, err := sp.search(best.prog, limit, opt.Passes.Set[recomputeOption]); err == nil && !slices.Equal(pr.Split.Bounds, best.part.Bounds) {
				f, err := synthesize(cfg, sp, pl, pr.Split, limit)
				if err != nil {
					return nil, err
				}
				if f != nil && f.ms < best.ms {
					best = f
				}
			}
		}
		// The local search, from the best synthesized order and from the
		// best family's on pl (with its split), runs below for every
		// placement at once.
		pn := &plan{pk: pk, pl: pl, even: even, best: best}
		if best != nil {
			pn.starts = append(pn.starts, start{best.prog, best.part})
		}
		if from != nil && from.layers.Bounds != nil {
			pn.starts = append(pn.starts, start{from.built, from.layers})
		}
		if best != nil {
			var ok bool
			if pn.bestLow, ok = lowered(best.prog, best.part); !ok {
				pn.best = nil
			}
		}
		plans = append(plans, pn)
	}
	if sp.Partition && len(on) > 0 {
		// A placement whose ranks' work is more even, from the fastest.
		// One progress step, however many moves it takes.
		if top := fastestPlan(plans); top != nil {
			progress("balancing the ranks of %s V=%d (%d moves of a stage at most)", top.pk.name, top.pk.virtual, balanceMoves)
			bp, err := balancePlan(cfg, sp, top, limit, lowered)
			if err != nil {
				return nil, err
			}
			if bp != nil {
				plans = append(plans, bp)
			}
		} else {
			progress("balancing no placement (nothing synthesized)")
		}
	}
	if n := splitClimbs(opt.Budget, limit, sp); n > 0 && len(on) > 0 {
		// The split of the placement whose synthesized order is fastest,
		// climbed (climbSplit), the local search then starting from it.
		if top := fastestPlan(plans); top != nil {
			progress("climbing the split of %s V=%d (%d syntheses at most)", top.pk.name, top.pk.virtual, n)
			f, err := climbSplit(cfg, sp, top.pl, top.best.part, limit, n)
			if err != nil {
				return nil, err
			}
			if f != nil && f.ms < top.best.ms*(1-1e-9) {
				if low, ok := lowered(f.prog, f.part); ok && low.Makespan < top.bestLow.Makespan*(1-1e-9) {
					top.best, top.bestLow, top.starts[0] = f, low, start{f.prog, f.part}
				}
			}
		} else {
			progress("climbing no split (nothing synthesized)")
		}
	}
	bound := func(b *synthFound) (float64, error) { return synthBound(b, sp, opt.Passes.Set[recomputeOption]) }
	if err := pilotPlans(plans, sp, annealBudget(opt.Budget), reinsertBudget(opt.Budget), lowered, bound, familyBest(fams, opt, sp, limit), progress); err != nil {
		return nil, err
	}
	// The local searches, on all cores: each writes only its own result,
	// and each starts from its own order (not from another's result), so
	// the outcome is that of running them one after another.
	type job struct {
		pn *plan
		st start
		q  ir.Program
		sc synth.Score
		ok bool
	}
	var jobs []*job
	for _, pn := range plans {
		for _, st := range pn.starts {
			jobs = append(jobs, &job{pn: pn, st: st})
		}
	}
	if len(on) > 0 {
		progress("improving %d orders (local search)", len(jobs))
	}
	par.ForRanksW(min(runtime.GOMAXPROCS(0), len(jobs)), len(jobs), func(_, i int) {
		j := jobs[i]
		eval := func(q ir.Program) (synth.Score, bool) { return lowered(q, j.st.part) }
		budget := max(1, min(RepairBudget, repairWork/max(4*j.st.prog.NumSteps(), 1)))
		if opt.Budget > 0 {
			budget = min(opt.Budget, MaxBudget)
		}
		q := j.st.prog
		if c, err := sp.Pricing.Split(j.st.part, 1); err == nil {
			q, _, _ = synth.Fill(q, c, eval, budget)
		}
		j.q, j.sc, _ = synth.Repair(q, eval, budget)
		_, j.ok = eval(j.q)
	})
	for _, pn := range plans {
		best, bestLow := pn.best, pn.bestLow
		for _, j := range jobs {
			if j.pn != pn || !j.ok {
				continue
			}
			if best == nil || j.sc.Makespan < bestLow.Makespan*(1-1e-9) {
				r, mem, err := sp.run(j.q, j.st.part)
				if err != nil || (limit > 0 && mem > limit*(1+1e-9)) {
					continue
				}
				best, bestLow = &synthFound{prog: j.q, part: j.st.part, ms: r.Makespan, mem: mem, bubble: r.Bubble}, j.sc
			}
		}
		if best == nil {
			continue
		}
		one := cfg
		one.Schedule, one.Virtual = pn.pk.name, pn.pk.virtual
		pl := pn.pl
		one.Placement = &pl
		out = append(out, &autoTry{cfg: one, built: best.prog, index: index, synth: true,
			partitioned: !slices.Equal(best.part.Bounds, pn.even.Bounds), layers: best.part,
			bound: best.ms, boundMem: best.mem, boundBubble: best.bubble})
		index++
	}
	return out, nil
}

// fastestPlan is the plan whose synthesized order is fastest lowered
// (the first on a tie), nil when none has one.
func fastestPlan(plans []*plan) *plan {
	var top *plan
	for _, pn := range plans {
		if pn.best != nil && (top == nil || pn.bestLow.Makespan < top.bestLow.Makespan) {
			top = pn
		}
	}
	return top
}

// pilotPlans runs synth.Pilot, on all cores, from the recipes of the
// pilotTop placements whose synthesized orders are fastest among those
// that PriorityOrder built (Periodic's priority orders), each with
// pilotWork steps of rollouts, and keeps each order it makes that is
// faster lowered. A placement whose lower bound under the cap is more
// than annealRoom below the fastest of those orders also has its recipe
// annealed first (synth.Anneal, annealing steps), and both recipes are
// rolled out: the faster order stays; its steps are then moved one at a
// time (synth.Reinsert, reinserting steps timed), and that order stays
// when it is faster lowered. The local search then starts from it. Each
// placement writes only its own result: deterministic.
func pilotPlans(plans []*plan, sp *SplitModel, annealing, reinserting int, lowered func(ir.Program, model.Partition) (synth.Score, bool), bound func(*synthFound) (float64, error), beaten float64, progress func(format string, args ...any)) error {
	var top []*plan
	for _, pn := range plans {
		if pn.best == nil || pn.best.recipe == nil {
			continue
		}
		if lb, err := bound(pn.best); err == nil && lb >= beaten {
			continue // no order of it beats a family's (a family wins a tie)
		}
		top = append(top, pn)
	}
	slices.SortStableFunc(top, func(a, b *plan) int { return cmp.Compare(a.bestLow.Makespan, b.bestLow.Makespan) })
	top = top[:min(pilotTop, len(top))]
	if len(top) == 0 {
		if len(plans) > 0 { // one progress step wherever placements were synthesized on
			progress("no order to roll out (none beats a family's)")
		}
		return nil
	}
	// Which to anneal: those whose bound leaves room below the fastest.
	anneal, n := make([]bool, len(top)), 0
	for i, pn := range top {
		if lb, err := bound(pn.best); err == nil && lb*(1+annealRoom) < top[0].bestLow.Makespan {
			anneal[i] = true
			n++
		}
	}
	if n > 0 {
		progress("annealing %d, rolling out %d and reinserting %d orders (anneal, pilot, reinsert)", n, len(top), n)
	} else {
		progress("rolling out %d orders (pilot)", len(top))
	}
	found := make([]*synthFound, len(top))
	scores := make([]synth.Score, len(top))
	errs := make([]error, len(top))
	par.ForRanksW(min(runtime.GOMAXPROCS(0), len(top)), len(top), func(_, i int) {
		b := top[i].best
		recipes := []synth.Recipe{*b.recipe}
		if anneal[i] {
			if ra, _, err := synth.Anneal(b.problem, *b.recipe, annealing); err == nil {
				recipes = append(recipes, ra)
			}
		}
		// keep records q when it is faster lowered than the best so far;
		// false on an error, which ends the placement's search.
		keep := func(q ir.Program) bool {
			cur := top[i].bestLow
			if found[i] != nil {
				cur = scores[i]
			}
			sc, ok := lowered(q, b.part)
			if !ok || !(sc.Makespan < cur.Makespan*(1-1e-9)) {
				return true
			}
			r, mem, err := sp.run(q, b.part)
			if err != nil {
				errs[i] = err
				return false
			}
			found[i] = &synthFound{prog: q, part: b.part, ms: r.Makespan, mem: mem, bubble: r.Bubble, problem: b.problem}
			scores[i] = sc
			return true
		}
		for _, rc := range recipes {
			q, err := synth.Pilot(b.problem, rc, pilotWork)
			if err != nil {
				continue // stuck: not expected from a recipe whose order ran
			}
			if !keep(q) {
				return
			}
		}
		if !anneal[i] {
			return
		}
		// Then the best order so far, step by step (synth.Reinsert).
		from := b.prog
		if found[i] != nil {
			from = found[i].prog
		}
		if q, _, err := synth.Reinsert(b.problem, from, reinserting); err == nil { // an error is not expected: from ran
			keep(q)
		}
	})
	for i, pn := range top {
		if errs[i] != nil {
			return fmt.Errorf("schedule auto: pilot order on %s: %w", pn.pl, errs[i])
		}
		if found[i] != nil {
			pn.best, pn.bestLow, pn.starts[0] = found[i], scores[i], start{found[i].prog, found[i].part}
		}
	}
	return nil
}

// familyBest is the lowered makespan of the family order auto's search
// would take at least (an upper bound of what it chooses): the first of
// fams, by their bound, whose order lowered fits the limit, of the first
// familyProbes that the bound says may fit; +Inf when none does. A
// synthesized order whose lower bound (synthBound) is not below it cannot
// be chosen (a family wins a tie), and pilotPlans spends nothing on it:
// under a recompute policy the families' orders often are that fast
// already.
func familyBest(fams []*autoTry, opt Options, sp *SplitModel, limit float64) float64 {
	order := slices.Clone(fams)
	slices.SortStableFunc(order, func(a, b *autoTry) int { return cmp.Compare(a.bound, b.bound) })
	// Under a recompute policy a family's bound is of its order without
	// the RECOMPUTE steps, which hold less: lowered, it may fit.
	recomputes := opt.Passes.Set[recomputeOption] != "" && opt.Passes.Set[recomputeOption] != "none"
	probes := 0
	for _, t := range order {
		if t.err != nil || (limit > 0 && !recomputes && t.boundMem > limit*(1+1e-9)) {
			continue
		}
		if probes++; probes > familyProbes {
			break
		}
		_, r, mem, err := EvaluateSplit(t.cfg, opt.Options, sp, t.layers)
		if err == nil && !(limit > 0 && mem > limit) {
			return r.Makespan
		}
	}
	return math.Inf(1)
}

// familyProbes is how many family orders familyBest lowers at most (one
// lowering each, milliseconds at the sizes auto synthesizes for).
const familyProbes = 4

// synthBound is the lower bound pilotPlans compares a synthesized order
// with, in the currency of its lowered makespan (bestLow): sim.LowerBound
// of the order under its problem's cap, or, under a recompute policy
// (the lowering option recompute, `-recompute`), of the order with the
// policy's RECOMPUTE steps (their work counted, as auto's recompute tries
// bound theirs; no cap, which RECOMPUTE's freed memory would void). The
// bound of the order alone leaves out the recompute work that every
// lowered order of it pays, so under a policy it lay below the fastest
// order by that work at every size: each placement was annealed and
// reinserted (some 40 s of CPU at P = 2, M = 4 on examples/models/tiny.json)
// for room the order's steps cannot give.
func synthBound(b *synthFound, sp *SplitModel, policy string) (float64, error) {
	plain := func() (float64, error) { return sim.LowerBound(b.prog, b.problem.Cost, b.problem.BoundOptions()) }
	if policy == "" {
		return plain()
	}
	pol, err := passes.ParseRecompute(policy)
	if err != nil {
		return plain() // the lowering reports it
	}
	if pol, err = pol.Resolve(b.prog, sp.Model.MarksOf(b.part)); err != nil {
		return plain()
	}
	withR, err := passes.Recompute(b.prog, pol)
	if err != nil || withR.NumSteps() == b.prog.NumSteps() { // -recompute none
		return plain()
	}
	return sim.LowerBound(withR, b.problem.Cost, sim.BoundOptions{})
}

// pilotTop and pilotWork bound pilotPlans: the placements it improves and
// the steps one pilot's rollouts start (about a second of CPU at 3·10⁶).
const (
	pilotTop  = 2
	pilotWork = 3_000_000
)

// annealWork and annealRoom bound the annealing before the rollouts:
// the list scheduler's steps it spends on one recipe by default (10–17 s
// of one core at P = 4, M = 16 on 32 stages), and how far the lower
// bound of a placement's cap (sim.LowerBound) must lie below the fastest
// order for it to run at all; maxAnnealWork is the most an explicit
// budget gives it.
const (
	annealWork    = 40_000_000
	maxAnnealWork = 1_000_000_000
	annealRoom    = 0.01
)

// annealBudget is the annealing's steps for Options.Budget: the
// default, annealWork, for 0, else annealWork scaled by the budget's
// ratio to RepairBudget, up to maxAnnealWork.
func annealBudget(budget int) int {
	if budget <= 0 {
		return annealWork
	}
	return int(min(int64(annealWork)*int64(budget)/RepairBudget, maxAnnealWork))
}

// reinsertWork bounds the reinsertion after the rollouts of a placement
// that anneals, in the steps synth.Reinsert times (11–14 s of one core);
// maxReinsertWork is the most an explicit budget gives it.
const (
	reinsertWork    int64 = 1_000_000_000
	maxReinsertWork int64 = 25_000_000_000
)

// reinsertBudget is reinsertWork for Options.Budget, scaled as
// annealBudget scales the annealing.
func reinsertBudget(budget int) int {
	if budget <= 0 {
		return int(reinsertWork)
	}
	return int(min(reinsertWork*int64(budget)/RepairBudget, maxReinsertWork, math.MaxInt))
}

// A start is an order the local search starts from, with its split.
type start struct {
	prog ir.Program
	part model.Partition
}

// A plan is one placement's synthesis before its local search: the best
// synthesized order (nil: none) and its lowered score, and the orders the
// local search starts from.
type plan struct {
	pk      synthPlacement
	pl      ir.Placement
	even    model.Partition
	best    *synthFound
	bestLow synth.Score
	starts  []start
}

// RepairBudget is the number of simulations one local search (synth.Fill,
// then synth.Repair, each) of a synthesized candidate spends at most by
// default, and repairWork the simulated steps (simulations times the
// order's steps) it spends at most; MaxBudget is the largest
// Options.Budget (`-budget`), which replaces both.
const (
	RepairBudget = 600
	repairWork   = 1_500_000
	MaxBudget    = 100_000
)

type synthFound struct {
	prog            ir.Program
	part            model.Partition
	ms, mem, bubble float64
	// problem is what prog was synthesized for and recipe, when
	// PriorityOrder built prog, how (for synth.Pilot).
	problem synth.Problem
	recipe  *synth.Recipe
}

// synthesize is synth.Search on pl with the model's layers split by part,
// the cap the limit (model units), the params of each rank's stages held
// throughout, and under a limit also synth.Periodic: the order with the
// least simulated makespan of the two. nil when neither finds one.
func synthesize(cfg ir.Config, sp *SplitModel, pl ir.Placement, part model.Partition, limit float64) (*synthFound, error) {
	return synthesizeWith(cfg, sp, pl, part, limit, periodicTrials, true)
}

// synthesizeWith is synthesize with trials of synth.Periodic at each
// period, and synth.Exact on small problems only when exact is set.
func synthesizeWith(cfg ir.Config, sp *SplitModel, pl ir.Placement, part model.Partition, limit float64, trials int, exact bool) (*synthFound, error) {
	c, err := sp.Pricing.Split(part, 1)
	if err != nil {
		return nil, err
	}
	act, params, err := partition.StageMemory(sp.Model, part, 1)
	if err != nil {
		return nil, err
	}
	fixed := make([]float64, pl.Ranks())
	for s, r := range pl.RankOf {
		fixed[r] += params[s]
	}
	pr := synth.Problem{Placement: pl, Micro: cfg.Micro, Cost: c, Act: act, Fixed: fixed, Cap: limit}
	var orders []ir.Program
	var recipes []*synth.Recipe // by order: how PriorityOrder built it, if it did
	beat := 0.0
	if f, err := synth.Search(pr, synth.Rules(cfg.Ranks, cfg.Micro)); err == nil {
		orders, recipes, beat = append(orders, f.Program), append(recipes, nil), f.Makespan
	}
	if limit > 0 { // the steady state packs a tight cap; without one the list scheduler's ramps win
		if q, rc, ok, err := synth.PeriodicRecipe(pr, trials, beat); err == nil && ok {
			orders, recipes = append(orders, q), append(recipes, rc)
		}
	}
	if exact && 3*pl.Stages()*cfg.Micro <= exactSteps && beat > 0 {
		// Small enough to search every order for one faster than the
		// list scheduler's (an hour's CPU would not do for the table's
		// rows; a tenth of a second does for P = 2, M = 8).
		if o, ok, err := synth.Exact(pr, exactNodes, beat); err == nil && ok && o.Program.Ranks != nil {
			orders, recipes = append(orders, o.Program), append(recipes, nil)
		}
	}
	var best *synthFound
	for i, q := range orders {
		r, mem, err := sp.run(q, part)
		if err != nil {
			return nil, fmt.Errorf("schedule auto: synthesized order on %s: %w", pl, err)
		}
		if best == nil || r.Makespan < best.ms*(1-1e-9) {
			best = &synthFound{prog: q, part: part, ms: r.Makespan, mem: mem, bubble: r.Bubble, problem: pr, recipe: recipes[i]}
		}
	}
	return best, nil // nil: every rule stuck, or the cap below one chunk
}

// exactSteps and exactNodes bound synth.Exact in synthesize: the most
// compute steps of a problem it is tried on, and the search nodes it
// spends (under a tenth of a second of CPU; synthesize runs for
// each placement and split).
const (
	exactSteps = 128
	exactNodes = 200_000
)

// periodicTrials is the trials synth.Periodic makes at each period and
// skip probability.
const periodicTrials = 200

// evaluateSynth lowers and verifies a synthesized try's order and
// simulates it with its split, as EvaluateSplit does a family's.
func evaluateSynth(t *autoTry, opt gen.Options, sp *SplitModel) (gen.Result, sim.Result, float64, error) {
	opt = sp.lowerOptions(opt, t.layers)
	res, err := gen.LowerOrder(t.cfg, t.built, opt)
	if err != nil {
		return res, sim.Result{}, 0, err
	}
	r, mem, err := sp.run(res.Program, t.layers)
	if err != nil {
		return res, r, 0, &SimulationError{Config: res.Config, Err: err}
	}
	res.Layers = t.layers.Bounds
	return res, r, mem, nil
}

// splitClimbs is how many syntheses climbSplit spends: with -partition
// auto under a memory limit and an explicit budget (Options.Budget),
// one per SplitClimbCost simulations of it, at most maxSplitClimbs; else
// none, so that auto's default time is unchanged.
func splitClimbs(budget int, limit float64, sp *SplitModel) int {
	if budget <= 0 || !(limit > 0) || sp == nil || !sp.Partition {
		return 0
	}
	return min(budget/SplitClimbCost, maxSplitClimbs)
}

// SplitClimbCost and maxSplitClimbs set splitClimbs: -budget 2000 gives
// 40 syntheses (the LLM-like model at P = 4, M = 16 within 18.5: 501.3 →
// 485.3 after 36, on the zigzag with V = 8).
const (
	SplitClimbCost = 50
	maxSplitClimbs = 2000
)

// climbSplit is a local search over the split of pl's stages for a
// synthesized order: from part it tries partition.Climb's moves (a
// layer's worth of count from one stage to another), judging each by an
// order synthesized for the new split (the list rules and synth.Periodic
// with climbTrials trials, no exhaustive search) and keeping the move
// when that order is faster, first improvement, until no move improves or
// n syntheses are spent. It returns the order synthesize builds for the
// best split found (nil when none runs); deterministic.
func climbSplit(cfg ir.Config, sp *SplitModel, pl ir.Placement, part model.Partition, limit float64, n int) (*synthFound, error) {
	if len(part.Bounds) != pl.Stages()+1 {
		return nil, fmt.Errorf("schedule auto: a split of %d stages for a placement of %d", len(part.Bounds)-1, pl.Stages())
	}
	cnt := part.Counts()
	quick := func() (float64, error) {
		f, err := synthesizeWith(cfg, sp, pl, model.FromCounts(cnt), limit, climbTrials, false)
		if err != nil || f == nil {
			return math.Inf(1), err
		}
		return f.ms, nil
	}
	best, err := quick()
	if err != nil {
		return nil, err
	}
	if err := partition.Climb(cnt, n-1, func() (bool, error) {
		ms, err := quick()
		if err != nil || !(ms < best*(1-1e-9)) {
			return false, err
		}
		best = ms
		return true, nil
	}); err != nil {
		return nil, err
	}
	return synthesize(cfg, sp, pl, model.FromCounts(cnt), limit)
}

// climbTrials is the trials of synth.Periodic at each period in
// climbSplit's syntheses (a tenth of synthesize's).
const climbTrials = 20
