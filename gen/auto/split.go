package auto

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/pricing"
	"github.com/ppgen/ppgen/gen/sim"
)

// SplitModel is a model description (gen/model, `-model`) as the auto
// scheduler sees it: each candidate splits its layers into the candidate's
// stages, evenly by count, and with Partition also by gen/partition's
// Search for the candidate's own order; its memory is counted in the
// model's units (partition.Memory: the activations of its live chunks plus
// the params of its stages, per rank), which Options.MemLimit then
// bounds.
type SplitModel struct {
	Model model.Model // Pricing's model
	// Pricing prices a program of copies model copies whose every copy
	// splits the layers by a partition (pricing.Pricing.Split).
	Pricing *pricing.Pricing
	// Partition also tries every family with the split Search finds for
	// its order (`-partition auto`).
	Partition bool
}

// NewSplitModel is the SplitModel of p's model description (p must have
// one), with partition for -partition auto.
func NewSplitModel(p *pricing.Pricing, partition bool) (*SplitModel, error) {
	m, ok := p.Model()
	if !ok {
		return nil, errors.New("schedule auto: a split model needs a model description")
	}
	return &SplitModel{Model: m, Pricing: p, Partition: partition}, nil
}

// even is the even split of the layers into p's stages.
func (sp *SplitModel) even(p ir.Program) (model.Partition, error) {
	copies := partition.Copies(p)
	if p.Stages()%copies != 0 {
		return model.Partition{}, fmt.Errorf("%d stages do not form %d model copies", p.Stages(), copies)
	}
	return model.Even(len(sp.Model.Layers), p.Stages()/copies)
}

// search is partition.Search for p's order under the limit (model units),
// each split measured with its RECOMPUTE steps under the -recompute value
// recompute ("" for none: SplitRecompute).
func (sp *SplitModel) search(p ir.Program, limit float64, recompute string) (partition.Result, error) {
	copies := partition.Copies(p)
	return partition.Search(sp.Model, p, partition.Options{
		Cost:     func(part model.Partition) (sim.Cost, error) { return sp.Pricing.Split(part, copies) },
		MemLimit: limit,
		Program:  SplitRecompute(recompute, sp.Model),
	})
}

// SplitRecompute is, for a -recompute value that recomputes, what a split
// search (partition.Options.Program) measures in place of a compute
// order: the order with its RECOMPUTE steps at the latest point (the
// recompute pass without @idle), with the shares and, under -recompute
// model or selective:S=model, the layers m marks in the split's stages;
// so that the search counts the memory the split's recompute leaves. nil
// for none or a value the pass refuses (it says why when it lowers).
func SplitRecompute(recompute string, m model.Model) func(ir.Program, model.Partition) (ir.Program, error) {
	pol, err := passes.ParseRecompute(recompute)
	if err != nil || (!pol.All && len(pol.Stages) == 0 && !pol.Model) {
		return nil
	}
	return func(p ir.Program, part model.Partition) (ir.Program, error) {
		pol, err := pol.Resolve(p, m.MarksOf(part))
		if err != nil {
			return ir.Program{}, err
		}
		return passes.Recompute(p, pol)
	}
}

// run simulates p with its layers split by part and returns the
// simulation and the busiest rank's memory.
func (sp *SplitModel) run(p ir.Program, part model.Partition) (sim.Result, float64, error) {
	c, err := sp.Pricing.Split(part, partition.Copies(p))
	if err != nil {
		return sim.Result{}, 0, &StageCostError{Err: err}
	}
	r, err := sim.Run(p, c)
	if err != nil {
		return r, 0, err
	}
	mem, err := partition.Memory(sp.Model, part, p, r)
	if err != nil {
		return r, 0, err
	}
	return r, slices.Max(mem), nil
}

// lowerOptions is opt for lowering a program whose every model copy
// splits the layers by part: its transfers laid out for the split's costs
// and -recompute model taking the marks of the split's stages.
func (sp *SplitModel) lowerOptions(opt gen.Options, part model.Partition) gen.Options {
	opt.CommCost = sp.Pricing.CommSplit(part.Bounds)
	opt.Passes.Marked = sp.Model.MarksOf(part)
	return opt
}

// EvaluateSplit is Evaluate for a model description: it lowers cfg and
// simulates the result with the model's layers split by part (one copy's
// stages), and returns the busiest rank's memory in the model's units.
func EvaluateSplit(cfg ir.Config, opt gen.Options, sp *SplitModel, part model.Partition) (gen.Result, sim.Result, float64, error) {
	opt = sp.lowerOptions(opt, part)
	res, err := gen.Lower(cfg, opt)
	if err != nil {
		return res, sim.Result{}, 0, err
	}
	r, mem, err := sp.run(res.Program, part)
	if err != nil {
		if _, ok := err.(*StageCostError); ok {
			return res, r, 0, err
		}
		return res, r, 0, &SimulationError{Config: res.Config, Err: err}
	}
	res.Layers = part.Bounds
	return res, r, mem, nil
}
