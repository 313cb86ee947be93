// Package gen is ppgen's compiler front door: it builds a schedule family's
// compute-only order, lowers it (data loads, transfers, slots), verifies the
// result and emits Go source. Every function here is pure: it returns bytes
// and values and writes no file (cmd/ppgen does the writing).
//
//	Lower(cfg)          build -> passes -> verify (LowerFamily: for a family already looked up)
//	LowerOrder(cfg, p)  passes -> verify of a compute order already built for cfg
//	LowerProgram(p)     the same from an imported program (compute-only or lowered)
//	Generate(cfg, opt)  Lower, then emit
//
// The auto scheduler (the best family by simulation, synthesized orders)
// is gen/auto's: it calls Lower and LowerOrder for each candidate; this
// package knows nothing of it.
package gen

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

// Result is a lowered, verified program and what lowering and verification found.
type Result struct {
	Config  ir.Config  // the normalized config (zero when lowered from a program)
	Compute ir.Program // the compute-only order the lowered program runs (after split/overlap passes)
	Program ir.Program // the lowered program
	Info    passes.LowerInfo
	Report  verify.Report
	// Implicit is the number of DATA_LOAD and OPT_STEP steps LowerProgram
	// added to a lowered program that left them implicit (PyTorch's form).
	Implicit int
	// Layers, for a program run on a model description's layers, is their
	// split into one model copy's stages: stage s holds layers Layers[s]
	// to Layers[s+1]-1 (model.Partition's Bounds); nil otherwise.
	Layers []int
}

// Options configures Lower.
type Options struct {
	Passes passes.Options
	Verify verify.Options
	// CommCost, when set and Passes.Comm.Cost is nil, is the cost model
	// the lowered program is simulated or run under: the timed comm order
	// also lays a compute order's transfers out by its compute costs and,
	// when transfers take time, by the whole model, and the fastest of
	// those and the default layout is kept (lowerPasses).
	// nil, or an error: the passes' default (sim.DefaultCost's F = 1,
	// B = 2, W = 1).
	CommCost func(compute ir.Program) (sim.Cost, error)
}

// lowerPasses is passes.Lower of compute. With opt.CommCost (and the
// timed comm order, no cost of its own in opt.Passes) it lowers compute
// up to three times, with the transfers laid out by the passes' default
// cost, by the compute and host-step costs of opt.CommCost's model
// (without the transfers' latency: Comm, Act, BW), and by the whole model
// (latency included, when it has any), simulates each under the model and
// returns the fastest (the earlier on a tie). Without latency the second
// keeps the compute order's timeline exactly; with it no layout always
// wins (P = 8, M = 32, data = 0.25, comm = 0.02: mpipe 115.69 by the
// default, 116.83 by its own cost; the LLM-like model with comm = 1: zbv
// 713.8 by the first two, 658.3 by the third, zb-h2 606.7 by the default,
// 620.3 by the third: TestLatencyLayout), so lowering under a cost is never
// slower than lowering without one.
func lowerPasses(compute ir.Program, opt Options) (ir.Program, []string, error) {
	best, names, err := passes.RunPipeline(compute, opt.Passes)
	if err != nil {
		return best, names, err
	}
	layouts, full := CostLayouts(compute, opt)
	if len(layouts) == 0 {
		return best, names, nil
	}
	r, err := sim.Run(best, full)
	ok := err == nil
	for _, o := range layouts {
		q, qnames, err := passes.RunPipeline(compute, o)
		if err != nil {
			continue
		}
		qr, err := sim.Run(q, full)
		if err == nil && (!ok || qr.Makespan < r.Makespan*(1-1e-12)) {
			best, names, r, ok = q, qnames, qr, true
		}
	}
	return best, names, nil
}

// CostLayouts returns the pass options lowerPasses tries beside opt's own,
// in order, and opt.CommCost's model for compute (resolved): the timed comm
// order laid out by the model's compute and host-step costs (without the
// transfers' latency) unless they are proportional to the default costs
// (the same layout as opt's own), then by the whole model when its
// transfers take time. None when there is nothing to lay out differently:
// no CommCost, a cost of the passes' own, another comm order, or a model
// that fails.
func CostLayouts(compute ir.Program, opt Options) ([]passes.Options, sim.Cost) {
	if opt.CommCost == nil || opt.Passes.Comm.Cost != nil || opt.Passes.Comm.Order != passes.Timed {
		return nil, sim.Cost{}
	}
	full, err := opt.CommCost(compute)
	if err == nil {
		full, err = full.Resolve(compute.Stages())
	}
	if err != nil {
		return nil, sim.Cost{}
	}
	var out []passes.Options
	noLatency := full
	noLatency.Comm, noLatency.Act, noLatency.BW = 0, nil, 0
	if def, err := sim.DefaultCost().Resolve(compute.Stages()); err == nil && !proportional(noLatency, def) {
		o := opt.Passes
		o.Comm.Cost = &noLatency
		out = append(out, o)
	}
	if transfersTakeTime(full) {
		o := opt.Passes
		o.Comm.Cost = &full
		out = append(out, o)
	}
	return out, full
}

// transfersTakeTime reports whether a resolved cost model gives a
// transfer between ranks a positive duration.
func transfersTakeTime(c sim.Cost) bool {
	if c.Comm > 0 {
		return true
	}
	for s := range c.Act {
		if c.ActTime(s) > 0 {
			return true
		}
	}
	return false
}

// Build normalizes cfg and returns the family's compute-only program.
func Build(cfg ir.Config) (ir.Config, ir.Program, error) {
	fam, err := schedules.Lookup(cfg.Schedule)
	if err != nil {
		return cfg, ir.Program{}, err
	}
	return fam.BuildConfig(cfg)
}

// Lower builds the schedule, lowers it and verifies the result.
func Lower(cfg ir.Config, opt Options) (Result, error) {
	fam, err := schedules.Lookup(cfg.Schedule)
	if err != nil {
		return Result{}, err
	}
	return LowerFamily(fam, cfg, opt)
}

// LowerFamily is Lower for a family already looked up.
func LowerFamily(fam schedules.Family, cfg ir.Config, opt Options) (Result, error) {
	if fam.ComputeOnly != "" {
		return Result{}, &ScheduleError{fam.Name, fmt.Errorf("schedule %s cannot be lowered yet: %s", fam.Name, fam.ComputeOnly)}
	}
	cfg, compute, err := fam.BuildConfig(cfg)
	if err != nil {
		return Result{}, err
	}
	if fam.OwnedData {
		if opt.Passes.ShipLabels {
			return Result{Config: cfg}, &ScheduleError{cfg.Schedule, fmt.Errorf("schedule %s: its owners load only inputs, and shipped labels start on the first stage's rank with the input; use -ship-labels with another schedule, or load the labels on the last stage's rank", cfg.Schedule)}
		}
		if opt.Passes.Swap > 0 {
			return Result{Config: cfg}, &ScheduleError{cfg.Schedule, fmt.Errorf("schedule %s with -swap: an owner's shipped input (and preprocess output) is not a saved activation the swap steps move, and the first stage's rank holds every received one until its forward; drop -swap or use interleaved", cfg.Schedule)}
		}
		opt.Passes.OwnedData = true
	}
	res, err := LowerOrder(cfg, compute, opt)
	if err != nil || fam.Reference == nil || opt.CommCost == nil {
		return res, err
	}
	return lowerReference(fam, cfg, res, opt)
}

// lowerReference lowers fam's reference order for cfg (Family.Reference)
// too and returns it in res's place when, simulated under opt.CommCost's
// model, it runs faster than res (by more than rounding): a family that
// judges its candidates compute-only is then never slower, lowered, than
// its reference. An order equal to res's, or a cost or reference that
// fails, leaves res.
func lowerReference(fam schedules.Family, cfg ir.Config, res Result, opt Options) (Result, error) {
	ref, err := fam.Reference(cfg)
	if err != nil {
		return res, fmt.Errorf("schedule %s: its reference order (a ppgen bug; please report it): %w", cfg.Schedule, err)
	}
	if sameOrder(ref, res.Compute) {
		return res, nil
	}
	cost, err := opt.CommCost(res.Compute)
	if err != nil {
		return res, nil // no model to compare under: the family's own
	}
	alt, err := LowerOrder(cfg, ref, opt)
	if err != nil {
		return res, nil
	}
	mine, err1 := sim.Run(res.Program, cost)
	theirs, err2 := sim.Run(alt.Program, cost)
	if err1 != nil || err2 != nil || !(theirs.Makespan < mine.Makespan-1e-9*max(1, mine.Makespan)) {
		return res, nil
	}
	return alt, nil
}

// sameOrder reports whether a and b hold the same steps on every rank.
func sameOrder(a, b ir.Program) bool {
	if len(a.Ranks) != len(b.Ranks) {
		return false
	}
	for r := range a.Ranks {
		if !slices.EqualFunc(a.Ranks[r], b.Ranks[r], ir.Step.Equal) {
			return false
		}
	}
	return true
}

// LowerOrder lowers and verifies compute, an order built for cfg (by its
// family, or synthesized for it: gen/auto), after checking that the
// pass options apply to it; the result's Config is cfg.
func LowerOrder(cfg ir.Config, compute ir.Program, opt Options) (Result, error) {
	if err := passes.CheckOptions(compute, opt.Passes); err != nil {
		return Result{Config: cfg}, &ScheduleError{cfg.Schedule, fmt.Errorf("schedule %s: %w", cfg.Schedule, err)}
	}
	res, err := lowerCompute(compute, opt)
	res.Config = cfg
	return res, err
}

// StagesPerShare is the number of stages that make one rank's share of the
// model in res: V, or V/2 when the stages form two model copies (dualpipe),
// each holding a full share. A micro-batch walks S/Copies stages.
func (res Result) StagesPerShare() int {
	return max(res.Config.Virtual/max(res.Program.Copies, 1), 1)
}

// ScheduleError is an error of Lower whose text names the schedule family it
// concerns ("schedule zbv: ..."), so that a caller listing several schedules
// need not name it again.
type ScheduleError struct {
	Schedule string
	Err      error
}

func (e *ScheduleError) Error() string { return e.Err.Error() }
func (e *ScheduleError) Unwrap() error { return e.Err }

// LowerProgram lowers and verifies an imported program. A compute-only
// program (no transfers) is verified as it is, then lowered like a built
// one. A program that already holds transfers is verified as it is (so a
// diagnosis names the program's own steps), then gets the steps that
// PyTorch's form leaves implicit (AddImplicitSteps) and its slots, and is
// verified again. Errors of the program as given are verify's (*verify.Error,
// *verify.DeadlockError) or the passes'; a failure after that is an
// *InternalError.
func LowerProgram(p ir.Program, opt Options) (Result, error) {
	if err := ir.CheckSize(len(p.Ranks), p.Stages(), p.Micro); err != nil {
		return Result{}, fmt.Errorf("program: %w", err)
	}
	if !p.HasComm() {
		// TIE_GRADs in a compute order say nothing of where they go among
		// the transfers lowering adds: the tie pass places them (-tie), and
		// without -tie verify refuses them.
		if q := passes.DropTies(p); len(opt.Passes.Ties) > 0 {
			p = q
		}
		// So do collectives: -clip places them anew; without it a compute
		// order cannot say where they go among the transfers.
		q, err := passes.DropCollectives(p, opt.Passes.ClipNorm)
		if err != nil {
			return Result{Compute: p}, fmt.Errorf("compute order: %w", err)
		}
		p = q
		if _, err := verify.Check(p, verify.Options{}); err != nil {
			return Result{Compute: p}, fmt.Errorf("compute order: %w", err)
		}
		// An order of forwards only lowers as a forward-only program, as
		// -forward-only makes one (no OPT_STEP).
		opt.Passes.ForwardOnly = opt.Passes.ForwardOnly || p.ForwardOnly()
		return lowerCompute(p, opt)
	}
	res := Result{Compute: p.ComputeOnly()}
	if len(opt.Passes.Ties) > 0 {
		// -tie: the exchanges go at the end of the ranks, unless the file
		// places them itself (then verify checks where).
		var err error
		if p, err = passes.Tie(p, opt.Passes.Ties); err != nil {
			return res, err
		}
		res.Info.Passes = append(res.Info.Passes, "tie")
	}
	if opt.Passes.Batch {
		// Before the first check: batching can make a program safe that
		// deadlocks unbatched (two ranks sending to each other first).
		p, _ = passes.Coalesce(p)
		res.Info.Passes = append(res.Info.Passes, "coalesce")
	}
	if rep, err := verify.Check(p, opt.Verify); err != nil {
		res.Program, res.Report = p, rep
		return res, err
	}
	lowered := p
	if !hasSlots(p) {
		lowered, res.Implicit = AddImplicitSteps(p)
		var err error
		lowered, res.Info.Slots, err = passes.AssignSlots(lowered)
		if err != nil {
			return res, err
		}
		res.Info.Passes = append(res.Info.Passes, "slots")
	} else {
		res.Info.Slots = passes.SlotCounts(p)
	}
	res.Info.RecvDistance = passes.RecvDistance(lowered)
	res.Info.RecvDistances = passes.RecvDistances(lowered)
	res.Program = lowered
	rep, err := verify.Check(lowered, opt.Verify)
	res.Report = rep
	if err != nil && res.Implicit > 0 {
		var ve *verify.Error
		if errors.As(err, &ve) && ve.Code == verify.Memory {
			return res, err
		}
		return res, &InternalError{What: fmt.Sprintf("the program with the %d DATA_LOAD and OPT_STEP steps its form leaves implicit", res.Implicit), Err: err}
	}
	return res, err
}

// AddImplicitSteps adds to a lowered program (one with transfers) the
// steps PyTorch's form leaves implicit, which runtime/pipe needs: the
// DATA_LOAD before each F of the first and the last stage when the program
// has no data step at all (passes.InsertData), and an OPT_STEP at the end of
// every rank when no rank has one (passes.InsertOptStep), unless it is
// forward-only (ir.Program.ForwardOnly: no gradients to step). A program with
// some of them is left to verify, which requires them everywhere. It
// returns the program and the number of steps added; import, gen, sim,
// report and verify of an -in file all add them here, through
// LowerProgram.
func AddImplicitSteps(p ir.Program) (ir.Program, int) {
	data, opt := false, false
	for _, steps := range p.Ranks {
		for i := range steps {
			switch k := steps[i].Kind; k {
			case ir.DataLoad, ir.DataSend, ir.DataRecv, ir.MpipeSend, ir.MpipeRecv:
				data = true
			case ir.OptStep:
				opt = true
			}
		}
	}
	before := p.NumSteps()
	if !data {
		p = passes.InsertData(p)
	}
	if !opt && !p.ForwardOnly() { // a forward-only program steps no optimizer
		p = passes.InsertOptStep(p)
	}
	return p, p.NumSteps() - before
}

// InternalError reports a broken invariant of ppgen itself: a program it
// built or lowered from an input that verified fails verification. It is
// never the user's fault; the message asks for a report.
type InternalError struct {
	What string // what failed, e.g. "the lowered program"
	Err  error
}

func (e *InternalError) Error() string {
	return fmt.Sprintf("%s failed verification (a ppgen bug; please report it): %v", e.What, e.Err)
}

func (e *InternalError) Unwrap() error { return e.Err }

// proportional reports whether a's step costs are b's times one factor
// k > 0 (the timed order's layout then is the same): F, B, I, W per stage,
// the host steps' costs and the overlap fraction. Both are resolved for
// the same stages.
func proportional(a, b sim.Cost) bool {
	if len(a.F) == 0 || len(b.F) == 0 || !(b.F[0] > 0) || a.Overlap != b.Overlap {
		return false
	}
	k := a.F[0] / b.F[0]
	same := func(x, y float64) bool { return math.Abs(x-k*y) <= 1e-12*max(1, math.Abs(x)) }
	for _, xs := range [][2][]float64{{a.F, b.F}, {a.B, b.B}, {a.I, b.I}, {a.W, b.W}} {
		if len(xs[0]) != len(xs[1]) {
			return false
		}
		for i := range xs[0] {
			if !same(xs[0][i], xs[1][i]) {
				return false
			}
		}
	}
	return k > 0 && same(a.DataLoad, b.DataLoad) && same(a.Unshard, b.Unshard) && same(a.Reduce, b.Reduce) &&
		same(a.Opt, b.Opt) && same(a.Swap, b.Swap)
}

func lowerCompute(compute ir.Program, opt Options) (Result, error) {
	res := Result{Compute: compute}
	lowered, names, err := lowerPasses(compute, opt)
	if err != nil {
		// A compute order that cannot run reports better as itself than
		// as a failed lowering.
		if _, verr := verify.Check(compute, verify.Options{}); verr != nil {
			return res, fmt.Errorf("compute order: %w", verr)
		}
		return res, err
	}
	res.Program = lowered
	if opt.Passes.Split || opt.Passes.Overlap || opt.Passes.DxDwInOverlap || opt.Passes.FillW || opt.Passes.ForwardOnly {
		res.Compute = lowered.ComputeOnly() // the order after the passes that rewrite it
	}
	// The slot counts and receive distances are measured beside the
	// verifier's deadlock simulation, which is serial and leaves a core
	// idle once the FIFO check beside it is done.
	vopt := opt.Verify
	vopt.Beside = func() {
		res.Info = passes.Measure(lowered)
		res.Info.Passes = names
	}
	rep, err := verify.Check(lowered, vopt)
	res.Report = rep
	var ve *verify.Error
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &ve) && ve.Code == verify.Memory:
		return res, err // the user's activation limit
	default:
		return res, &InternalError{What: "the lowered program", Err: err}
	}
}

func hasSlots(p ir.Program) bool {
	for _, steps := range p.Ranks {
		for _, s := range steps {
			if s.Slot >= 0 {
				return true
			}
		}
	}
	return false
}

// Generate lowers cfg and emits its Go source. opt.Emit.Schedule defaults to cfg.Schedule.
func Generate(cfg ir.Config, opt Options, eo emit.Options) ([]byte, Result, error) {
	res, err := Lower(cfg, opt)
	if err != nil {
		return nil, res, err
	}
	if eo.Schedule == "" {
		eo.Schedule = res.Config.Schedule
	}
	src, err := Emit(res, eo)
	return src, res, err
}

// Emit emits the Go source of a lowered result.
func Emit(res Result, eo emit.Options) ([]byte, error) {
	if eo.Slots == nil {
		eo.Slots = res.Info.Slots
	}
	return emit.Emit(res.Program, eo)
}
