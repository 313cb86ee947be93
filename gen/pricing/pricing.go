// Package pricing is ppgen's one price list: the cost model a command line
// gives with -cost and -model, built once (New) and asked by every command
// that simulates, by the auto search (gen/auto), by gen/partition and by
// the lowering passes' comm layout (gen.Options.CommCost). It answers what
// a program, a split of a model's layers, one rank's share of the model or
// a cost-aware family's order costs, and holds the rules by which -cost
// and -model combine (see Pricing).
package pricing

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/sim"
)

// Pricing is the cost model of one command line: the -cost spec and the
// -model description, as given.
//
// How they combine:
//
//   - Neither: sim.DefaultCost (F = 1, B = 2, W = 1, the rest 0).
//   - -cost alone: the whole model, parsed by sim.ParseCost for the
//     program's stages (keys not given keep their defaults); per-stage
//     lists are allowed where the stages are known (Stages), refused
//     where schedules of different stage counts are compared (Share).
//   - -model: the model's layers, split into the stages (evenly by count,
//     model.Even, unless a split is given: Split, Program), give F, B or
//     I and W, and act per stage, repeated per model copy; the model's
//     comm and bw are the transfers'. -cost may not give f, b, i, w or act
//     then (an error naming -model); it adds the other keys: data, opt,
//     overlap, unshard, reduce, swap, dp and param are -cost's, and comm
//     and bw, when -cost gives them, override the model's.
//
// Its errors are *Error: bad input on the command line.
type Pricing struct {
	spec      string       // -cost ("" none)
	model     *model.Model // -model (nil none)
	modelName string       // the -model flag's value, for messages
	// pre and preB are the forward and backward costs of the preprocess
	// taken out of the -model file's layers (-mpipe-pre:
	// model.Model.SplitPreprocess), every cost of a split's
	// sim.Cost.Pre and PreB; 0 without one.
	pre, preB float64
}

// New returns the pricing of a -cost spec and a -model description read
// from the file named modelName (m nil: no -model).
func New(spec string, m *model.Model, modelName string) *Pricing {
	return &Pricing{spec: spec, model: m, modelName: modelName}
}

// NewPreprocess is New for a -model description whose first layers are
// the preprocess (-mpipe-pre): m holds the other layers, which the stages
// split, and pre and preB are the preprocess's forward and backward costs,
// which every cost of a split carries as sim.Cost.Pre (the first stage's
// input loads run it) and PreB (its backward at OPT_STEP). -cost may not
// give pre or preb too.
func NewPreprocess(spec string, m *model.Model, modelName string, pre, preB float64) *Pricing {
	p := New(spec, m, modelName)
	p.pre, p.preB = pre, preB
	return p
}

// OfModel is the pricing of a model description alone (no -cost): its
// layers' costs, split as asked.
func OfModel(m model.Model) *Pricing { return New("", &m, "") }

// Model returns the -model description, ok false without one.
func (p *Pricing) Model() (m model.Model, ok bool) {
	if p.model == nil {
		return model.Model{}, false
	}
	return *p.model, true
}

// Error is bad -cost or -model input, or a split the model does not fit.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errorf(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// modelKeys are the cost keys a -model file gives, in lower case (the
// compute keys, act and every sim.KindKeys key); -cost may not give them
// too.
var modelKeys = func() map[string]bool {
	keys := map[string]bool{"f": true, "b": true, "i": true, "w": true, "act": true}
	for _, kk := range sim.KindKeys() {
		keys[strings.ToLower(kk.Key)] = true
	}
	return keys
}()

// stageLists are c's per-stage compute lists: F, B, I, W and those of
// sim.KindKeys, which are scaled and repeated as F is.
func stageLists(c *sim.Cost) []*[]float64 {
	lists := []*[]float64{&c.F, &c.B, &c.I, &c.W}
	for _, kk := range sim.KindKeys() {
		lists = append(lists, kk.List(c))
	}
	return lists
}

// Stages is the cost model a program of the given number of stages is
// simulated by: -cost, or with -model the model's layers split evenly by
// count into the stages (model.Even: what a trainer does without a
// partitioner), merged with -cost as Pricing says. copies is the number of
// model copies the stages form (dualpipe's 2, else 1): each copy holds the
// whole model, so the layers split into stages/copies stages, repeated per
// copy.
func (p *Pricing) Stages(stages, copies int) (sim.Cost, error) {
	if p.model == nil {
		if p.spec == "" {
			return sim.DefaultCost(), nil
		}
		c, err := sim.ParseCost(p.spec, stages)
		if err != nil {
			return sim.Cost{}, &Error{Msg: err.Error()}
		}
		return c, nil
	}
	copies = max(copies, 1)
	if stages%copies != 0 {
		return sim.Cost{}, errorf("-model %s: %d stages do not form %d model copies", p.modelName, stages, copies)
	}
	part, err := model.Even(len(p.model.Layers), stages/copies)
	if err != nil {
		return sim.Cost{}, errorf("-model %s: %v", p.modelName, err)
	}
	return p.Split(part, copies)
}

// Comm is Stages for a program: the cost its transfers are laid out by
// (gen.Options.CommCost).
func (p *Pricing) Comm(prog ir.Program) (sim.Cost, error) {
	return p.Stages(prog.Stages(), max(prog.Copies, 1))
}

// CommSplit is Comm for programs whose every model copy splits the
// layers by layers (one copy's stage bounds; nil: the even split): the
// cost their transfers are laid out by when the split is known before
// lowering (a candidate's split, -partition auto's).
func (p *Pricing) CommSplit(layers []int) func(ir.Program) (sim.Cost, error) {
	return func(prog ir.Program) (sim.Cost, error) { return p.Program(prog, layers, 0) }
}

// Program is the cost model a lowered program is simulated by: with
// -model and a split of its layers (one copy's stage bounds, as
// gen.Result.Layers records), the model split so (Split); without -model,
// for a program chosen among schedules of different stage counts by the
// cost of one rank's share (the auto search: share > 0, its stages per
// share), Share(share); else Stages.
func (p *Pricing) Program(prog ir.Program, layers []int, share int) (sim.Cost, error) {
	if share > 0 && p.model == nil {
		return p.Share(share)
	}
	copies := max(prog.Copies, 1)
	if p.model == nil || layers == nil {
		return p.Stages(prog.Stages(), copies)
	}
	return p.Split(model.Partition{Bounds: layers}, copies)
}

// Split is the cost model of a program of copies model copies whose every
// copy splits the model's layers by part (its per-stage lists repeated per
// copy), merged with -cost as Pricing says. Without -model it is an error.
func (p *Pricing) Split(part model.Partition, copies int) (sim.Cost, error) {
	if p.model == nil {
		return sim.Cost{}, errors.New("pricing: a split of layers without a model description")
	}
	c, err := p.model.Cost(part)
	if err != nil {
		if p.modelName == "" {
			return sim.Cost{}, err // a model of no file (OfModel): its own error
		}
		return sim.Cost{}, errorf("-model %s: %v", p.modelName, err)
	}
	if copies > 1 {
		for _, l := range append(stageLists(&c), &c.Act) {
			if *l != nil {
				*l = slices.Repeat(*l, copies)
			}
		}
	}
	c.Pre, c.PreB = p.pre, p.preB
	if p.spec == "" {
		return c, nil
	}
	stages := part.Stages() * max(copies, 1)
	given := map[string]bool{}
	for _, field := range strings.Split(p.spec, ",") {
		key, _, _ := strings.Cut(field, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		if modelKeys[key] {
			return sim.Cost{}, errorf("-cost %s: %s is given per layer by -model %s; -cost may add the other keys (comm, bw, data, opt, overlap, unshard, reduce, swap, dp)", p.spec, strings.TrimSpace(strings.SplitN(field, "=", 2)[0]), p.modelName)
		}
		if (key == "pre" || key == "preb") && (p.pre != 0 || p.preB != 0) {
			return sim.Cost{}, errorf("-cost %s: %s is the preprocess's cost, which -mpipe-pre takes from the layers of -model %s; give one of them", p.spec, key, p.modelName)
		}
		given[key] = true
	}
	extra, err := sim.ParseCost(p.spec, stages)
	if err != nil {
		return sim.Cost{}, &Error{Msg: err.Error()}
	}
	c.DataLoad, c.Overlap, c.Unshard, c.Reduce, c.Opt, c.Swap, c.DP = extra.DataLoad, extra.Overlap, extra.Unshard, extra.Reduce, extra.Opt, extra.Swap, extra.DP
	c.Param = extra.Param
	if given["pre"] {
		c.Pre = extra.Pre
	}
	if given["preb"] {
		c.PreB = extra.PreB
	}
	if given["comm"] {
		c.Comm = extra.Comm
	}
	if given["bw"] {
		c.BW = extra.BW
	}
	if c, err = c.Resolve(stages); err != nil {
		return sim.Cost{}, errorf("-model %s with -cost %s: %v", p.modelName, p.spec, err)
	}
	return c, nil
}

// Share is -cost as the cost of one rank's share of the model, for
// comparing schedules of different stage counts (`ppgen sim -compare`,
// the auto search without -model): resolved, its compute costs of one
// stage scaled to 1/v (PerShare). Per-stage lists are refused.
func (p *Pricing) Share(v int) (sim.Cost, error) {
	c := sim.DefaultCost()
	if p.spec != "" {
		var err error
		if c, err = sim.ParseCost(p.spec, 0); err != nil {
			return sim.Cost{}, &Error{Msg: err.Error()}
		}
	}
	c, err := c.Resolve(0)
	if err != nil {
		return c, &Error{Msg: err.Error()}
	}
	if c, err = PerShare(c, v); err != nil {
		return c, errorf("-cost: %v", err)
	}
	return c, nil
}

// AutoCost is -cost as the auto search takes it (auto.Options.Cost): parsed
// for no particular stage count, the zero Cost (auto's default) when no
// -cost is given.
func (p *Pricing) AutoCost() (sim.Cost, error) {
	if p.spec == "" {
		return sim.Cost{}, nil
	}
	c, err := sim.ParseCost(p.spec, 0)
	if err != nil {
		return c, errorf("-cost: %v", err)
	}
	return c, nil
}

// Order is the cost model a family whose order depends on it
// (schedules.Family.UsesCost) is built for, on ranks × v stages: Stages of
// those stages, resolved, its F, I, W and comm. Values the family rejects
// (ranks or v out of range) give nil: its own check says why.
func (p *Pricing) Order(ranks, v int) (*ir.Costs, error) {
	if ranks < 1 || v < 1 || ranks > ir.MaxIndex+1 || v > (ir.MaxIndex+1)/ranks {
		return nil, nil
	}
	stages := ranks * v
	c, err := p.Stages(stages, 1)
	if err != nil {
		return nil, err
	}
	if c, err = c.Resolve(stages); err != nil {
		return nil, errorf("-cost: %v", err)
	}
	return &ir.Costs{F: c.F, I: c.I, W: c.W, Comm: c.Comm}, nil
}

// ShareOrder is Order for a family compared by the cost of one rank's
// share (Share): each of its v stages per rank at 1/v of the share.
func (p *Pricing) ShareOrder(v int) (*ir.Costs, error) {
	share, err := p.Share(max(v, 1))
	if err != nil {
		return nil, err
	}
	return &ir.Costs{F: share.F, I: share.I, W: share.W, Comm: share.Comm}, nil
}

// ShareComm is Comm for programs compared by c, the resolved cost of one
// rank's share of the model: each program's stages at PerShare of c for
// its stages per rank and model copy.
func ShareComm(c sim.Cost) func(ir.Program) (sim.Cost, error) {
	return func(p ir.Program) (sim.Cost, error) {
		return PerShare(c, max(p.Stages()/max(len(p.Ranks), 1)/max(p.Copies, 1), 1))
	}
}

// PerShare returns c with the compute costs of one stage scaled to 1/v of
// the given ones (transfers, data, FSDP, optimizer and swap costs are
// kept), for comparing schedules with different numbers of stages per
// rank. c must be resolved and have one value per key.
func PerShare(c sim.Cost, v int) (sim.Cost, error) {
	if len(c.Act) > 1 {
		return c, errors.New("a cost model for comparing schedules takes one activation size (act), not a per-stage list: a stage's output is the same size whatever V cuts the model into")
	}
	for _, xs := range stageLists(&c) {
		if *xs == nil {
			continue // a KindKeys list not given: its default kind's
		}
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
