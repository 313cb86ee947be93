// Package auto is ppgen's schedule search, `-schedule auto`: it lowers
// every family that can run a config (each V from 1 to MaxVirtual it
// accepts) through gen, simulates each under a cost model, and returns
// the fastest within a memory limit; with a model description it also
// splits the model's layers for each candidate (gen/partition) and
// synthesizes orders of its own (gen/synth). `ppgen sim -compare`'s loop
// (Compare) evaluates a list of schedules the same way.
//
// It imports gen, never the other way: gen's Lower lowers one family, and
// a caller that reads "auto" (gen/gencmd) calls Lower here instead.
package auto

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/pricing"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// Name is the schedule name that asks for the search (Lower): it lowers every
// family that can run the config (each V from 1 to MaxVirtual it
// accepts), simulates each under Options.Cost, and returns the one with
// the smallest makespan whose activation memory is within
// Options.MemLimit; ties go to the smaller memory, then to the earlier
// family name and V (and, with Options.Split, the even split before the
// partitioned one). With Options.Split (a model description) it also
// synthesizes orders for the model's stages and the memory limit
// (gen/synth, synthTries), listed after the families and losing ties to
// them. Under Options.MemLimit, when the limit keeps a faster order out
// (no candidate fits, or a family's compute order faster than the best
// holds more), it also lowers the families' orders with RECOMPUTE steps
// (-recompute: the fullest rank's stages until the order fits, else the
// first k stages, then every stage; at the latest point, the two fastest
// also @idle; recomputeTries), and with Options.SwapAuto with activation
// swapping at the distances it chooses (swapTries), listed last. Being the
// minimum over every candidate, it is never worse than the best fixed
// schedule among them (docs/design.md §4).
const Name = "auto"

// MaxVirtual is the largest V the auto scheduler tries.
const MaxVirtual = 4

// Options are gen's lowering options and what the search optimizes.
type Options struct {
	gen.Options
	// Cost is the cost model of one rank's share of the model: a
	// candidate with V stages per rank runs each stage at 1/V of its F, B,
	// I and W (pricing.PerShare), so every candidate does the same work. Per-stage
	// lists are refused (the candidates have different stage counts). The
	// zero Cost is sim.DefaultCost().
	Cost sim.Cost
	// MemLimit bounds the activation memory: the peak number of live
	// chunks of the busiest rank divided by the chunks per model share
	// (V, or V/2 for two model copies), i.e. in units of one micro-batch of
	// a rank's share of the model. 0 means no bound.
	MemLimit float64
	// Budget, when positive, is the number of simulations each local
	// search of a synthesized order (synth.Fill, then synth.Repair) spends
	// at most, up to MaxBudget; 0 keeps the default, RepairBudget, fewer
	// on large programs (repairWork simulated steps). With Split.Partition
	// and MemLimit, a positive budget also climbs the split of the best
	// placement's synthesized order, one synthesis per SplitClimbCost of
	// it (climbSplit), and the annealing of the recipes (synth.Anneal)
	// gets budget/RepairBudget times its default steps (annealBudget). A
	// larger budget may find a faster order and takes up to that many
	// times longer; the choice stays deterministic for a given budget.
	Budget int
	// Progress, when set, is called before each step of the search, with
	// what the step does, how many steps came before it and how many there
	// are: building each family ("building zbv"), then splitting the
	// model and simulating every candidate's compute order ("simulating
	// 26 candidates"), then, with a model, synthesizing on each placement
	// ("synthesizing synth(v) V=2"), with -partition auto balancing the
	// ranks ("balancing the ranks of synth(zigzag) V=4 ..."), with
	// -budget and -mem climbing the split ("climbing the split of ..."),
	// rolling out the orders found ("annealing 2, rolling out 3 ...", or
	// "no order to roll out ...") and improving them ("improving 9
	// orders (local search)"), each one step, then lowering the candidates
	// in increasing bound ("lowering and simulating"), then, under a
	// memory limit, trying recompute policies ("trying recompute under
	// the limit") and, with SwapAuto, swap distances ("trying swap under
	// the limit"). The calls come in that order, done counting up from 0.
	Progress func(step string, done, total int)
	// StageCost, when set, gives the cost model of a candidate with the
	// given number of stages forming copies model copies (ir.Program.Copies,
	// 1 for one pipeline) instead of Cost scaled to one rank's share
	// (pricing.PerShare): a model description split into each copy's stages
	// (gen/model, `-model`), so that every candidate runs the same layers.
	// A candidate it refuses (more stages than layers) is skipped with
	// its error.
	StageCost func(stages, copies int) (sim.Cost, error)
	// SwapAuto (-swap auto) lets the search under MemLimit also lower
	// the families' orders with activation swapping, at the distances it
	// chooses (swapTries), beside the recompute policies; the chosen
	// distance is Result.Swap. Swapping needs a tier to swap to at run
	// time, so the search does not swap unless asked. With Passes.Swap
	// set it is refused.
	SwapAuto bool
	// Split, when set, is the model description StageCost splits, as the
	// candidates see it (SplitModel): memory in the model's units, which
	// MemLimit then bounds, and with Split.Partition every family also
	// with its layers split for its order (gen/partition). It takes
	// precedence over StageCost.
	Split *SplitModel
}

// Result is the lowered result of the chosen candidate and every
// candidate the search tried.
type Result struct {
	gen.Result // the chosen one's; Config is its config
	Candidates []Candidate
	// Recompute is the chosen candidate's -recompute policy ("" for none).
	Recompute string
	// Swap is the chosen candidate's -swap distance, with
	// Options.SwapAuto (0 for none).
	Swap int
}

// Candidate is one schedule the search tried.
type Candidate struct {
	Config   ir.Config // normalized: Schedule and Virtual set
	Makespan float64
	Bubble   float64
	// ActMem is the activation memory as Options.MemLimit counts it.
	ActMem float64
	// Skipped says why the candidate could not be chosen ("" when it
	// could); a family that rejects the config at every V appears once,
	// with its reason at its default V.
	Skipped string
	// Layers, with Options.Split, is the candidate's split of the
	// model's layers (Result.Layers); Partitioned is set when it is
	// gen/partition's for the candidate's order, not the even one.
	Layers      []int
	Partitioned bool
	// Synthesized is set for an order gen/synth built for the model's
	// costs and the memory limit (Config.Schedule starts with
	// SynthPrefix) rather than a family's.
	Synthesized bool
	// Recompute is the -recompute policy the candidate was lowered with
	// ("full:0,1", "full@idle", ...; "" for none): under a limit that keeps
	// a faster order out, auto also tries the families' orders with
	// RECOMPUTE steps (docs/model.md, "Recompute in the search").
	Recompute string
	// Swap is the -swap distance the candidate was lowered with (0 for
	// none), with Options.SwapAuto (docs/model.md, "Swap in the search").
	Swap int
}

// EvalShare simulates the lowered result res under c, the cost of one
// rank's share of the model (pricing.PerShare), and returns the simulation and the
// activation memory in share units (see Options.MemLimit).
func EvalShare(res gen.Result, c sim.Cost) (sim.Result, float64, error) {
	vEff := res.StagesPerShare()
	share, err := pricing.PerShare(c, vEff)
	if err != nil {
		return sim.Result{}, 0, err
	}
	r, err := sim.Run(res.Program, share)
	if err != nil {
		return r, 0, err
	}
	return r, float64(r.Peak()) / float64(vEff), nil
}

// Evaluate is the evaluation of one candidate, what Lower does for each
// family and V and `ppgen sim -compare` for each schedule of its list: it
// lowers cfg and simulates the result under c, the resolved cost of one
// rank's share of the model (EvalShare). It returns the lowered result, the
// simulation and the activation memory in share units. A config that does
// not lower returns Lower's error; a failed simulation a *SimulationError.
//
// With opt.StageCost the candidate is simulated by the cost it gives
// for its stage count instead (a model split into its stages); its refusal
// is returned as a *StageCostError. Either way the candidate's transfers
// are laid out for that cost (Options.CommCost).
func Evaluate(cfg ir.Config, opt Options, c sim.Cost) (gen.Result, sim.Result, float64, error) {
	// The transfers laid out for the cost the candidate is judged by.
	if sc := opt.StageCost; sc != nil {
		opt.CommCost = func(p ir.Program) (sim.Cost, error) { return sc(p.Stages(), max(p.Copies, 1)) }
	} else {
		opt.CommCost = pricing.ShareComm(c)
	}
	res, err := gen.Lower(cfg, opt.Options)
	if err != nil {
		return res, sim.Result{}, 0, err
	}
	if opt.StageCost != nil {
		sc, err := opt.StageCost(res.Program.Stages(), max(res.Program.Copies, 1))
		if err != nil {
			return res, sim.Result{}, 0, &StageCostError{Err: err}
		}
		r, err := sim.Run(res.Program, sc)
		if err != nil {
			return res, r, 0, &SimulationError{Config: res.Config, Err: err}
		}
		return res, r, float64(r.Peak()) / float64(res.StagesPerShare()), nil
	}
	r, mem, err := EvalShare(res, c)
	if err != nil {
		return res, r, 0, &SimulationError{Config: res.Config, Err: err}
	}
	return res, r, mem, nil
}

// StageCostError is Options.StageCost's refusal of a candidate's stage
// count.
type StageCostError struct{ Err error }

func (e *StageCostError) Error() string { return e.Err.Error() }
func (e *StageCostError) Unwrap() error { return e.Err }

// SimulationError is Evaluate's failure to simulate a schedule that lowered.
type SimulationError struct {
	Config ir.Config // normalized
	Err    error
}

func (e *SimulationError) Error() string { return e.Err.Error() }
func (e *SimulationError) Unwrap() error { return e.Err }

// Lower is the search for cfg (cfg.Schedule is Name): the chosen
// candidate lowered, and every candidate tried. cfg.Virtual, when set,
// restricts the candidates to that V.
func Lower(cfg ir.Config, opt Options) (Result, error) {
	if cfg.Placement != nil {
		return Result{Result: gen.Result{Config: cfg}}, fmt.Errorf("schedule auto: -placement %s: auto tries each family with its own placement", cfg.Placement)
	}
	c := opt.Cost
	if c.F == nil && c.B == nil && c.I == nil && c.W == nil {
		c = sim.DefaultCost()
	}
	c, err := c.Resolve(0)
	if err == nil {
		_, err = pricing.PerShare(c, 1) // per-stage lists cannot compare schedules
	}
	if err != nil {
		return Result{Result: gen.Result{Config: cfg}}, fmt.Errorf("schedule auto: cost model: %w", err)
	}
	if err := checkSwapAuto(opt); err != nil {
		return Result{Result: gen.Result{Config: cfg}}, err
	}
	if !(opt.MemLimit >= 0) { // NaN too
		return Result{Result: gen.Result{Config: cfg}}, fmt.Errorf("schedule auto: memory limit %g; want 0 (none) or more", opt.MemLimit)
	}
	vs := []int{cfg.Virtual}
	if cfg.Virtual == 0 {
		vs = nil
		for v := 1; v <= MaxVirtual; v++ {
			vs = append(vs, v)
		}
	}
	cands, res, policy, swap, found, err := autoCandidates(cfg, vs, opt, c)
	if err != nil {
		return Result{Result: gen.Result{Config: cfg}}, err
	}
	if !found {
		return Result{Result: gen.Result{Config: cfg}, Candidates: cands}, autoNone(cfg, cands, opt.MemLimit, opt.Split)
	}
	return Result{Result: res, Candidates: cands, Recompute: policy, Swap: swap}, nil
}

// autoTry is one (family, V) the auto scheduler considers.
type autoTry struct {
	cfg   ir.Config // normalized once built
	built ir.Program
	err   error // Build's, or Lower's once evaluated
	// bound is the makespan of the compute order alone (no transfers, data
	// loads or optimizer step), a lower bound of the lowered program's:
	// lowering only adds steps and waits; boundMem and boundBubble are its
	// activation memory and bubble.
	bound, boundMem, boundBubble float64
	evaluated                    bool
	cand                         Candidate
	index                        int // in family and V order
	// With Options.Split: the layers' split (the even one, or with
	// partitioned the one gen/partition finds for the built order).
	partitioned bool
	layers      model.Partition
	// synth: the order is gen/synth's (synthTries), built holds it.
	synth bool
	// recompute: the -recompute policy of a recompute candidate
	// (recomputeTries), res its lowered result.
	recompute string
	swap      int // the -swap distance of a swap candidate (swapTries)
	res       gen.Result
	baseIndex int // the index of the family's try it recomputes
}

// NotLowered is the note of a candidate the auto scheduler did not lower:
// the makespan of its compute order alone, a lower bound of the lowered
// program's, is already over the best lowered makespan. Its row shows the
// compute order's figures.
const NotLowered = "not lowered: its compute order alone is slower"

// autoCandidates evaluates the candidates of every family at every V of
// vs. It simulates each candidate's compute order first (all of them, on
// all cores: a third of the lowered program's steps, none of the lowering's
// cost), whose makespan bounds the lowered program's from below, then
// lowers and simulates the candidates in increasing bound, and stops once
// the next bound is over the best eligible makespan found: those cannot
// win (they are reported with their bound and the note NotLowered). When
// an option rewrites the compute order (split, overlap, dxdw, W fill,
// forward-only) the built order bounds nothing and every candidate is
// lowered. The result lists the candidates in family and V order, and
// chooses exactly as evaluating all of them would (TestAutoPruningChoosesAsFull):
// the smallest by autoLess, the first in that order among equals. It returns
// the chosen candidate's lowered result, found false when none is eligible.
func autoCandidates(cfg ir.Config, vs []int, opt Options, c sim.Cost) (cands []Candidate, chosen gen.Result, policy string, swap int, found bool, err error) {
	type family struct {
		fam   schedules.Family
		tries []*autoTry
	}
	var fams []family
	var tries []*autoTry // the ones that built
	index := 0
	all := schedules.All()
	rewrites := opt.Passes.Split || opt.Passes.Overlap || opt.Passes.DxDwInOverlap || opt.Passes.FillW || opt.Passes.ForwardOnly
	var synthOn []synthPlacement
	if sp := opt.Split; sp != nil && !rewrites {
		synthOn = synthPlacementsFor(cfg, len(sp.Model.Layers))
	}
	done, total := 0, len(all)+2+len(synthOn)
	recomputeOn := recomputeEligible(opt, rewrites)
	if recomputeOn {
		total++ // recompute under the limit
	}
	swapOn := swapEligible(opt, rewrites)
	if swapOn {
		total++ // swap under the limit
	}
	if len(synthOn) > 0 {
		total += 2 // the pilot (pilotPlans) and the local searches
		if opt.Split.Partition {
			total++ // balancing the ranks (balancePlan)
		}
		if splitClimbs(opt.Budget, opt.MemLimit, opt.Split) > 0 {
			total++ // the split's climb
		}
	}
	progress := func(format string, args ...any) {
		if opt.Progress != nil {
			opt.Progress(fmt.Sprintf(format, args...), done, total)
		}
		done++
	}
	for _, fam := range all {
		progress("building %s", fam.Name)
		f := family{fam: fam}
		if fam.ComputeOnly == "" {
			for _, v := range vs {
				one := cfg
				one.Schedule, one.Virtual = fam.Name, v
				t := &autoTry{cfg: one, index: index}
				index++
				t.cfg, t.built, t.err = fam.BuildConfig(one)
				f.tries = append(f.tries, t)
				if t.err == nil {
					tries = append(tries, t)
				}
				if sp := opt.Split; sp != nil && sp.Partition && t.err == nil {
					pt := &autoTry{cfg: t.cfg, built: t.built, index: index, partitioned: true}
					index++
					f.tries = append(f.tries, pt)
					tries = append(tries, pt)
				}
			}
		}
		fams = append(fams, f)
	}
	progress("simulating %d candidates", len(tries))
	if !rewrites || opt.Split != nil {
		// The bounds, on all cores: each try writes only its own fields.
		steps := 0
		for _, t := range tries {
			steps += t.built.NumSteps()
		}
		errs := make([]error, len(tries))
		par.ForRanks(len(tries), steps, func(i int) {
			t := tries[i]
			vEff := max(t.cfg.Virtual/max(t.built.Copies, 1), 1)
			if sp := opt.Split; sp != nil {
				if err := t.splitBound(sp, opt.MemLimit, opt.Passes.Set[recomputeOption]); err != nil {
					t.err = err // this candidate cannot run the model
				}
				return
			}
			var share sim.Cost
			var err error
			if opt.StageCost != nil {
				if share, err = opt.StageCost(t.built.Stages(), max(t.built.Copies, 1)); err != nil {
					t.err = err // this candidate cannot run the model
					return
				}
			} else {
				share, err = pricing.PerShare(c, vEff)
			}
			var r sim.Result
			if err == nil {
				r, err = sim.Run(t.built, share)
			}
			if err != nil {
				errs[i] = fmt.Errorf("schedule auto: %s V=%d: %w", t.cfg.Schedule, t.cfg.Virtual, err)
				return
			}
			t.bound, t.boundMem, t.boundBubble = r.Makespan, float64(r.Peak())/float64(vEff), r.Bubble
		})
		if err := errors.Join(errs...); err != nil {
			return nil, gen.Result{}, "", 0, false, err
		}
	}
	tries = slices.DeleteFunc(tries, func(t *autoTry) bool { return t.err != nil })
	var synthesized []*autoTry
	if sp := opt.Split; sp != nil && !rewrites {
		if synthesized, err = synthTries(cfg, opt, sp, synthOn, opt.MemLimit, tries, index, progress); err != nil {
			return nil, gen.Result{}, "", 0, false, err
		}
		tries = append(tries, synthesized...)
	}
	progress("lowering and simulating")
	order := slices.Clone(tries)
	slices.SortStableFunc(order, func(a, b *autoTry) int { return cmp.Compare(a.bound, b.bound) })
	var bestTry *autoTry // the chosen one so far, its result in chosen
	best := math.Inf(1)  // its makespan
	const eps = 1e-9
	for _, t := range order {
		if !rewrites && t.bound > best+eps*max(1, best) {
			break // this bound and every later one: over the best
		}
		var res gen.Result
		var r sim.Result
		var mem float64
		if sp := opt.Split; sp != nil && t.synth {
			res, r, mem, err = evaluateSynth(t, opt.Options, sp)
		} else if sp != nil {
			res, r, mem, err = EvaluateSplit(t.cfg, opt.Options, sp, t.layers)
		} else {
			res, r, mem, err = Evaluate(t.cfg, opt, c)
		}
		if se := (*SimulationError)(nil); errors.As(err, &se) {
			return nil, gen.Result{}, "", 0, false, fmt.Errorf("schedule auto: %s V=%d: %w", t.cfg.Schedule, t.cfg.Virtual, se.Err)
		}
		t.evaluated = true
		if err != nil {
			t.err = err // its own failure (a StageCostError too): it is skipped
			continue
		}
		t.cand = Candidate{Config: res.Config, Makespan: r.Makespan, Bubble: r.Bubble, ActMem: mem, Layers: res.Layers, Partitioned: t.partitioned, Synthesized: t.synth}
		if opt.MemLimit > 0 && mem > opt.MemLimit {
			t.cand.Skipped = fmt.Sprintf("activation memory %.4g over the limit %.4g", mem, opt.MemLimit)
			continue
		}
		if bestTry == nil || autoLess(t.cand, bestTry.cand) || (!autoLess(bestTry.cand, t.cand) && t.index < bestTry.index) {
			bestTry, chosen, best = t, res, t.cand.Makespan
		}
	}
	var recomputed []*autoTry
	if recomputeOn {
		progress("trying recompute under the limit")
	}
	if recomputeOn && recomputeBinds(opt.MemLimit, tries, best) {
		recomputed = recomputeTries(opt, c, tries, best, index+len(synthesized))
		for _, t := range recomputed {
			if t.err != nil || t.cand.Skipped != "" {
				continue
			}
			if bestTry == nil || autoLess(t.cand, bestTry.cand) {
				bestTry, chosen, best = t, t.res, t.cand.Makespan
			}
		}
	}
	var swapped []*autoTry
	if swapOn {
		progress("trying swap under the limit")
		if recomputeBinds(opt.MemLimit, tries, best) {
			swapped = swapTries(opt, c, tries, best, index+len(synthesized)+len(recomputed))
			for _, t := range swapped {
				if t.err == nil && t.cand.Skipped == "" && (bestTry == nil || autoLess(t.cand, bestTry.cand)) {
					bestTry, chosen = t, t.res
				}
			}
		}
	}
	// The candidates in family and V order: one per V a family accepts, or
	// one saying why it accepts none (with its reason at its default V).
	var out []Candidate
	for _, f := range fams {
		def := max(f.fam.DefaultVirtual, 1)
		rejected := func(err error) {
			one := cfg
			one.Schedule, one.Virtual = f.fam.Name, def
			out = append(out, Candidate{Config: one, Skipped: err.Error()})
		}
		if f.fam.ComputeOnly != "" {
			rejected(errors.New("cannot be lowered yet: " + f.fam.ComputeOnly))
			continue
		}
		n := len(out)
		var firstErr error
		for _, t := range f.tries {
			switch {
			case t.err != nil && t.partitioned:
				// The even split of the same order is listed already.
				why := t.err.Error()
				if nf := (*partition.NoFitError)(nil); errors.As(t.err, &nf) {
					why = fmt.Sprintf("no split fits the memory limit: the least found is %.4g", nf.Least)
				}
				out = append(out, Candidate{Config: t.cfg, Skipped: why, Partitioned: true})
			case t.err != nil:
				if firstErr == nil || t.cfg.Virtual == def {
					firstErr = t.err
				}
			case t.evaluated:
				out = append(out, t.cand)
			default:
				out = append(out, Candidate{Config: t.cfg, Makespan: t.bound, Bubble: t.boundBubble, ActMem: t.boundMem, Skipped: NotLowered, Layers: t.layers.Bounds, Partitioned: t.partitioned})
			}
		}
		if len(out) == n && firstErr != nil {
			rejected(firstErr)
		}
	}
	for _, t := range synthesized {
		switch {
		case t.err != nil:
			out = append(out, Candidate{Config: t.cfg, Skipped: t.err.Error(), Partitioned: t.partitioned, Synthesized: true})
		case t.evaluated:
			out = append(out, t.cand)
		default:
			out = append(out, Candidate{Config: t.cfg, Makespan: t.bound, Bubble: t.boundBubble, ActMem: t.boundMem, Skipped: NotLowered, Layers: t.layers.Bounds, Partitioned: t.partitioned, Synthesized: true})
		}
	}
	for _, t := range append(recomputed, swapped...) {
		if t.err != nil {
			out = append(out, Candidate{Config: t.cfg, Skipped: t.err.Error(), Partitioned: t.partitioned, Recompute: t.recompute, Swap: t.swap})
			continue
		}
		out = append(out, t.cand)
	}
	if bestTry != nil {
		policy, swap = bestTry.recompute, bestTry.swap
	}
	return out, chosen, policy, swap, bestTry != nil, nil
}

// splitBound sets t's split of the model's layers (the even one, or the
// one gen/partition finds for t's order within the limit, its memory
// counted with the RECOMPUTE steps of the -recompute value given,
// recompute) and the bound from simulating t's order with it.
func (t *autoTry) splitBound(sp *SplitModel, limit float64, recompute string) error {
	if t.partitioned {
		pr, err := sp.search(t.built, limit, recompute)
		if err != nil {
			return err
		}
		t.layers = pr.Split
	} else {
		part, err := sp.even(t.built)
		if err != nil {
			return err
		}
		t.layers = part
	}
	r, mem, err := sp.run(t.built, t.layers)
	if err != nil {
		return err
	}
	t.bound, t.boundMem, t.boundBubble = r.Makespan, mem, r.Bubble
	return nil
}

// autoLess orders eligible candidates: smaller makespan, then smaller
// activation memory; the candidates' own order (family name, V) breaks ties.
func autoLess(a, b Candidate) bool {
	const eps = 1e-9
	if d := a.Makespan - b.Makespan; d < -eps*max(1, b.Makespan) || d > eps*max(1, b.Makespan) {
		return d < 0
	}
	return a.ActMem < b.ActMem
}

// autoNone explains why no candidate was eligible. With a model split
// evenly only (sp without Partition) it also gives the least limit any
// synthesized order could meet (oneMicroFloor) and names -partition auto.
func autoNone(cfg ir.Config, cands []Candidate, limit float64, sp *SplitModel) error {
	var fit []Candidate
	for _, c := range cands {
		if c.Makespan > 0 || c.ActMem > 0 {
			fit = append(fit, c)
		}
	}
	if len(fit) == 0 {
		var why []string
		for _, c := range cands {
			why = append(why, fmt.Sprintf("%s: %s", c.Config.Schedule, c.Skipped))
		}
		return fmt.Errorf("schedule auto: no family can run this config:\n  %s", strings.Join(why, "\n  "))
	}
	least := slices.MinFunc(fit, func(a, b Candidate) int { return cmp.Compare(a.ActMem, b.ActMem) })
	floor, hint := "", ""
	if sp != nil && !sp.Partition {
		if f, pk, ok := oneMicroFloor(cfg, sp); ok && f < least.ActMem {
			floor = fmt.Sprintf(", and an order synthesized for the model needs at least %.4g (%s V=%d: each rank holds one micro-batch's activations of its stages at once)", f, pk.name, pk.virtual)
		}
		hint = ", or add -partition auto (splits of the model's layers that may hold less)"
	}
	with := ""
	if least.Recompute != "" {
		with = " -recompute " + least.Recompute
	}
	if least.Swap != 0 {
		with += fmt.Sprintf(" -swap %d", least.Swap)
	}
	return fmt.Errorf("schedule auto: no schedule fits the activation memory limit %.4g: the smallest family's is %.4g (%s, V=%d%s)%s; raise the limit, or lower -micro for GPipe-like schedules%s",
		limit, least.ActMem, least.Config.Schedule, least.Config.Virtual, with, floor, hint)
}

// oneMicroFloor returns the least memory limit under which an order on one
// of auto's synthesized placements (synthPlacementsFor) can run with the
// model's layers split evenly, and that placement: when a micro-batch's
// last stage starts its backward every stage of its route holds that
// micro-batch's chunk, so each rank holds at least one micro-batch's
// activations of its stages, plus their params. ok is false when no
// placement fits the model.
func oneMicroFloor(cfg ir.Config, sp *SplitModel) (float64, synthPlacement, bool) {
	best, found := math.Inf(1), false
	var at synthPlacement
	for _, pk := range synthPlacementsFor(cfg, len(sp.Model.Layers)) {
		pl := pk.placement(cfg.Ranks)
		even, err := model.Even(len(sp.Model.Layers), pl.Stages())
		if err != nil {
			continue
		}
		act, params, err := partition.StageMemory(sp.Model, even, 1)
		if err != nil {
			continue
		}
		rank := make([]float64, pl.Ranks())
		for s, r := range pl.RankOf {
			rank[r] += act[s] + params[s]
		}
		if m := slices.Max(rank); m < best {
			best, at, found = m, pk, true
		}
	}
	return best, at, found
}
