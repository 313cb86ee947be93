package gen

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// Auto is the schedule name that asks Lower to choose: it lowers every
// family that can run the config (each V from 1 to MaxAutoVirtual it
// accepts), simulates each under Options.Auto.Cost, and returns the one with
// the smallest makespan whose activation memory is within
// Options.Auto.MemLimit; ties go to the smaller memory, then to the earlier
// family name and V. Being the minimum over every candidate, it is never
// worse than the best fixed schedule among them (docs/design.md §4).
const Auto = "auto"

// MaxAutoVirtual is the largest V the auto scheduler tries.
const MaxAutoVirtual = 4

// AutoOptions say what Auto optimizes.
type AutoOptions struct {
	// Cost is the cost model of one rank's share of the model: a
	// candidate with V stages per rank runs each stage at 1/V of its F, B,
	// I and W (ShareCost), so every candidate does the same work. Per-stage
	// lists are refused (the candidates have different stage counts). The
	// zero Cost is sim.DefaultCost().
	Cost sim.Cost
	// MemLimit bounds the activation memory: the peak number of live
	// chunks of the busiest rank divided by the chunks per model share
	// (V, or V/2 for two model copies), i.e. in units of one micro-batch of
	// a rank's share of the model. 0 means no bound.
	MemLimit float64
	// Progress, when set, is called before each family is tried: its
	// name and how many families came before it, of how many.
	Progress func(family string, done, families int)
}

// Candidate is one schedule Auto tried.
type Candidate struct {
	Config   ir.Config // normalized: Schedule and Virtual set
	Makespan float64
	Bubble   float64
	// ActMem is the activation memory as AutoOptions.MemLimit counts it.
	ActMem float64
	// Skipped says why the candidate could not be chosen ("" when it
	// could); a family that rejects the config at every V appears once,
	// with its reason at its default V.
	Skipped string
}

// ShareCost returns c with the compute costs of one stage scaled to 1/v of
// the given ones (transfers, data, FSDP, optimizer and swap costs are kept),
// for comparing schedules with different numbers of stages per rank. c must
// be resolved and have one value per key.
func ShareCost(c sim.Cost, v int) (sim.Cost, error) {
	if len(c.Act) > 1 {
		return c, errors.New("a cost model for comparing schedules takes one activation size (act), not a per-stage list: a stage's output is the same size whatever V cuts the model into")
	}
	for _, xs := range []*[]float64{&c.F, &c.B, &c.I, &c.W} {
		if len(*xs) > 1 {
			return c, errors.New("a cost model for comparing schedules takes one value per key (the cost of one rank's share of the model), not per-stage lists")
		}
		out := make([]float64, len(*xs))
		for i, x := range *xs {
			out[i] = x / float64(max(v, 1))
		}
		*xs = out
	}
	return c, nil
}

// StagesPerShare is the number of stages that make one rank's share of the
// model in res: V, or V/2 when the stages form two model copies (dualpipe),
// each holding a full share. A micro-batch walks S/Copies stages.
func (res Result) StagesPerShare() int {
	return max(res.Config.Virtual/max(res.Program.Copies, 1), 1)
}

// EvalShare simulates the lowered result res under c, the cost of one
// rank's share of the model (ShareCost), and returns the simulation and the
// activation memory in share units (see AutoOptions.MemLimit).
func EvalShare(res Result, c sim.Cost) (sim.Result, float64, error) {
	vEff := res.StagesPerShare()
	share, err := ShareCost(c, vEff)
	if err != nil {
		return sim.Result{}, 0, err
	}
	r, err := sim.Run(res.Program, share)
	if err != nil {
		return r, 0, err
	}
	return r, float64(r.Peak()) / float64(vEff), nil
}

// Evaluate is the evaluation of one candidate, what Auto does for each
// family and V and `ppgen sim -compare` for each schedule of its list: it
// lowers cfg and simulates the result under c, the resolved cost of one
// rank's share of the model (EvalShare). It returns the lowered result, the
// simulation and the activation memory in share units. A config that does
// not lower returns Lower's error; a failed simulation a *SimulationError.
func Evaluate(cfg ir.Config, opt Options, c sim.Cost) (Result, sim.Result, float64, error) {
	res, err := Lower(cfg, opt)
	if err != nil {
		return res, sim.Result{}, 0, err
	}
	r, mem, err := EvalShare(res, c)
	if err != nil {
		return res, r, 0, &SimulationError{Config: res.Config, Err: err}
	}
	return res, r, mem, nil
}

// SimulationError is Evaluate's failure to simulate a schedule that lowered.
type SimulationError struct {
	Config ir.Config // normalized
	Err    error
}

func (e *SimulationError) Error() string { return e.Err.Error() }
func (e *SimulationError) Unwrap() error { return e.Err }

// ScheduleError is an error of Lower whose text names the schedule family it
// concerns ("schedule zbv: ..."), so that a caller listing several schedules
// need not name it again.
type ScheduleError struct {
	Schedule string
	Err      error
}

func (e *ScheduleError) Error() string { return e.Err.Error() }
func (e *ScheduleError) Unwrap() error { return e.Err }

// lowerAuto is Lower for the Auto schedule. cfg.Virtual, when set, restricts
// the candidates to that V.
func lowerAuto(cfg ir.Config, opt Options) (Result, error) {
	if cfg.Placement != nil {
		return Result{Config: cfg}, fmt.Errorf("schedule auto: -placement %s: auto tries each family with its own placement", cfg.Placement)
	}
	c := opt.Auto.Cost
	if c.F == nil && c.B == nil && c.I == nil && c.W == nil {
		c = sim.DefaultCost()
	}
	c, err := c.Resolve(0)
	if err == nil {
		_, err = ShareCost(c, 1) // per-stage lists cannot compare schedules
	}
	if err != nil {
		return Result{Config: cfg}, fmt.Errorf("schedule auto: cost model: %w", err)
	}
	if !(opt.Auto.MemLimit >= 0) { // NaN too
		return Result{Config: cfg}, fmt.Errorf("schedule auto: memory limit %g; want 0 (none) or more", opt.Auto.MemLimit)
	}
	vs := []int{cfg.Virtual}
	if cfg.Virtual == 0 {
		vs = nil
		for v := 1; v <= MaxAutoVirtual; v++ {
			vs = append(vs, v)
		}
	}
	var cands []Candidate
	names := schedules.Names()
	for i, name := range names {
		fam, _ := schedules.Lookup(name)
		if opt.Auto.Progress != nil {
			opt.Auto.Progress(name, i, len(names))
		}
		cs, err := autoFamily(fam, cfg, vs, opt, c)
		if err != nil {
			return Result{Config: cfg}, err
		}
		cands = append(cands, cs...)
	}
	best := -1
	for i, cand := range cands {
		if cand.Skipped != "" {
			continue
		}
		if best < 0 || autoLess(cand, cands[best]) {
			best = i
		}
	}
	if best < 0 {
		return Result{Config: cfg, Auto: cands}, autoNone(cands, opt.Auto.MemLimit)
	}
	// Lowered again rather than kept: the candidates' programs can be
	// large, and lowering is deterministic.
	res, err := Lower(cands[best].Config, opt)
	if err != nil {
		return Result{Config: cfg, Auto: cands}, fmt.Errorf("schedule auto: %s V=%d: %w", cands[best].Config.Schedule, cands[best].Config.Virtual, err)
	}
	res.Auto = cands
	return res, nil
}

// autoFamily lowers and simulates family fam at each V of vs: the
// candidates it makes, one per V it accepts, or one saying why it accepts
// none.
func autoFamily(fam schedules.Family, cfg ir.Config, vs []int, opt Options, c sim.Cost) ([]Candidate, error) {
	def := max(fam.DefaultVirtual, 1)
	rejected := func(err error) ([]Candidate, error) {
		one := cfg
		one.Schedule, one.Virtual = fam.Name, def
		return []Candidate{{Config: one, Skipped: err.Error()}}, nil
	}
	if fam.ComputeOnly != "" {
		return rejected(errors.New("cannot be lowered yet: " + fam.ComputeOnly))
	}
	var cands []Candidate
	var firstErr error
	for _, v := range vs {
		one := cfg
		one.Schedule, one.Virtual = fam.Name, v
		res, r, mem, err := Evaluate(one, opt, c)
		if se := (*SimulationError)(nil); errors.As(err, &se) {
			return nil, fmt.Errorf("schedule auto: %s V=%d: %w", fam.Name, v, se.Err)
		}
		if err != nil {
			if firstErr == nil || v == def {
				firstErr = err
			}
			continue
		}
		cand := Candidate{Config: res.Config}
		cand.Makespan, cand.Bubble, cand.ActMem = r.Makespan, r.Bubble, mem
		if opt.Auto.MemLimit > 0 && mem > opt.Auto.MemLimit {
			cand.Skipped = fmt.Sprintf("activation memory %.4g over the limit %.4g", mem, opt.Auto.MemLimit)
		}
		cands = append(cands, cand)
	}
	if len(cands) == 0 && firstErr != nil {
		return rejected(firstErr)
	}
	return cands, nil
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

// autoNone explains why no candidate was eligible.
func autoNone(cands []Candidate, limit float64) error {
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
	return fmt.Errorf("schedule auto: no schedule fits the activation memory limit %.4g: the smallest is %.4g (%s, V=%d); raise the limit, or lower -micro for GPipe-like schedules",
		limit, least.ActMem, least.Config.Schedule, least.Config.Virtual)
}
