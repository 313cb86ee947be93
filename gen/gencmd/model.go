package gencmd

import (
	"os"
	"slices"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// modelKeys are the cost keys a -model file gives; -cost may not give them
// too.
var modelKeys = map[string]bool{"f": true, "b": true, "i": true, "w": true, "act": true}

// StageCost is the cost model a command simulates a program of the given
// number of stages by: -cost (ParseCost), or with -model the model's
// layers split evenly by count into the stages (model.Even: what a trainer
// does without a partitioner) with its comm and bw, and the other keys of
// -cost (data, opt, overlap, ...; comm and bw override the model's). Its
// errors are *UsageError.
//
// copies is the number of model copies the stages form (dualpipe's 2, else
// 1): each copy holds the whole model, so the layers split into
// stages/copies stages, repeated per copy.
func (r *Request) StageCost(stages, copies int) (sim.Cost, error) {
	if r.Model == "" {
		return ParseCost(r.Cost, stages)
	}
	m, err := r.ReadModel()
	if err != nil {
		return sim.Cost{}, err
	}
	copies = max(copies, 1)
	if stages%copies != 0 {
		return sim.Cost{}, usagef("-model %s: %d stages do not form %d model copies", r.Model, stages, copies)
	}
	p, err := model.Even(len(m.Layers), stages/copies)
	if err != nil {
		return sim.Cost{}, usagef("-model %s: %v", r.Model, err)
	}
	c, err := m.Cost(p)
	if err != nil {
		return sim.Cost{}, usagef("-model %s: %v", r.Model, err)
	}
	if copies > 1 {
		for _, l := range []*[]float64{&c.F, &c.B, &c.I, &c.W, &c.Act} {
			if *l != nil {
				*l = slices.Repeat(*l, copies)
			}
		}
	}
	if r.Cost == "" {
		return c, nil
	}
	given := map[string]bool{}
	for _, field := range strings.Split(r.Cost, ",") {
		key, _, _ := strings.Cut(field, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		if modelKeys[key] {
			return sim.Cost{}, usagef("-cost %s: %s is given per layer by -model %s; -cost may add the other keys (comm, bw, data, opt, overlap, unshard, reduce, swap, dp)", r.Cost, strings.TrimSpace(strings.SplitN(field, "=", 2)[0]), r.Model)
		}
		given[key] = true
	}
	extra, err := sim.ParseCost(r.Cost, stages)
	if err != nil {
		return sim.Cost{}, &UsageError{Msg: err.Error()}
	}
	c.DataLoad, c.Overlap, c.Unshard, c.Reduce, c.Opt, c.Swap, c.DP = extra.DataLoad, extra.Overlap, extra.Unshard, extra.Reduce, extra.Opt, extra.Swap, extra.DP
	c.Param = extra.Param
	if given["comm"] {
		c.Comm = extra.Comm
	}
	if given["bw"] {
		c.BW = extra.BW
	}
	if c, err = c.Resolve(stages); err != nil {
		return sim.Cost{}, usagef("-model %s with -cost %s: %v", r.Model, r.Cost, err)
	}
	return c, nil
}

// ReadModel reads the -model file (relative to Env.Dir; "-" for stdin).
func (r *Request) ReadModel() (model.Model, error) {
	f := os.Stdin
	if r.Model != "-" {
		var err error
		if f, err = os.Open(resolve(r.Env.Dir, r.Model)); err != nil {
			return model.Model{}, usagef("reading -model: %v", err)
		}
		defer f.Close()
	}
	m, err := model.Read(f)
	if err != nil {
		return model.Model{}, usagef("-model %s: %v", r.Model, err)
	}
	return m, nil
}

// orderCost is the cost model a family whose order depends on it
// (schedules.Family.UsesCost) is built for, on ranks × v stages: the
// StageCost of those stages (what sim, trace and report simulate it by;
// -cost is each stage's cost), resolved, its F, I, W and comm. Values the
// family rejects (ranks or v out of range) give nil: its own check says
// why.
func (r *Request) orderCost(ranks, v int) (*ir.Costs, error) {
	if ranks < 1 || v < 1 || ranks > ir.MaxIndex+1 || v > (ir.MaxIndex+1)/ranks {
		return nil, nil
	}
	stages := ranks * v
	c, err := r.StageCost(stages, 1)
	if err != nil {
		return nil, err
	}
	if c, err = c.Resolve(stages); err != nil {
		return nil, usagef("-cost: %v", err)
	}
	return &ir.Costs{F: c.F, I: c.I, W: c.W, Comm: c.Comm}, nil
}

// usesCost says whether the family named so builds its order for the cost
// model (schedules.Family.UsesCost).
func usesCost(name string) bool {
	fam, err := schedules.Lookup(name)
	return err == nil && fam.UsesCost
}

// costFamilies lists the families whose order the cost model shapes.
func costFamilies() []string {
	var names []string
	for _, f := range schedules.All() {
		if f.UsesCost {
			names = append(names, f.Name)
		}
	}
	return names
}
