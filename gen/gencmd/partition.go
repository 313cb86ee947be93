package gencmd

import (
	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/pricing"
	"github.com/ppgen/ppgen/gen/sim"
)

// PartitionStage is one stage of a split (`ppgen partition`).
type PartitionStage struct {
	Stage, Rank int
	First, End  int    // layers First..End-1
	Layers      string // their names, "block3..block7"
	F, I, W     float64
	Act, Params float64 // a live chunk's activations, the parameters
}

// PartitionReport is `ppgen partition`'s answer: the split gen/partition
// finds for the schedule's order, against the even one, both lowered and
// simulated.
type PartitionReport struct {
	Schedule               string
	Ranks, Virtual, Micro  int
	LayerCount             int
	Stages                 []PartitionStage // one model copy's
	Copies                 int
	Makespan, EvenMakespan float64
	Mem, EvenMem           float64 // the busiest rank's peak memory (model units)
	LowerBound, EvenBound  float64 // sim.LowerBound of each split's stages
	Bounds, EvenBounds     []int
	Evals                  int
}

// DefaultPartitionSchedule is the family `ppgen partition` splits for
// without -schedule, and DefaultPartitionScheduleV the one with -virtual
// V > 1 (1f1b takes only V = 1).
const (
	DefaultPartitionSchedule  = "1f1b"
	DefaultPartitionScheduleV = "interleaved"
)

// PartitionLayers lowers the schedule of the flags (-schedule, default
// DefaultPartitionSchedule, or DefaultPartitionScheduleV with -virtual
// V > 1; -micro, default 2·ranks) and splits the -model
// file's layers into its stages by gen/partition's Search for its compute
// order within -mem (the model's units), and simulates the lowered program
// with that split and with the even one.
func (r *Request) PartitionLayers() (PartitionReport, error) {
	if r.Model == "" {
		return PartitionReport{}, usagef("missing -model FILE: the model description whose layers to split (docs/model.md)")
	}
	one := *r
	if one.Schedule == "" {
		one.Schedule = DefaultPartitionSchedule
		if one.Virtual > 1 {
			one.Schedule = DefaultPartitionScheduleV
		}
	}
	if one.Schedule == auto.Name {
		return PartitionReport{}, usagef("-schedule auto: partition splits for one family's order; name it (ppgen sim -schedule auto -model FILE -partition auto tries every family with its split)")
	}
	if one.Micro == 0 && one.Ranks > 0 {
		one.Micro = 2 * one.Ranks
	}
	one.Partition, one.Mem = PartitionEven, 0
	m, err := one.ReadModel()
	if err != nil {
		return PartitionReport{}, err
	}
	res, err := one.Lower()
	if err != nil {
		return PartitionReport{}, err
	}
	price, err := one.Pricing()
	if err != nil {
		return PartitionReport{}, err
	}
	copies := max(res.Program.Copies, 1)
	pr, err := partition.Search(m, res.Compute, partition.Options{
		Cost:     func(part model.Partition) (sim.Cost, error) { return price.Split(part, copies) },
		MemLimit: r.Mem,
	})
	if err != nil {
		return PartitionReport{}, usagef("-model %s: %v", r.Model, err)
	}
	rep := PartitionReport{
		Schedule: res.Config.Schedule, Ranks: res.Config.Ranks, Virtual: res.Config.Virtual, Micro: res.Config.Micro,
		LayerCount: len(m.Layers), Copies: copies, Evals: pr.Evals,
		Bounds: pr.Split.Bounds, EvenBounds: pr.Even.Bounds,
	}
	sp, err := auto.NewSplitModel(price, false)
	if err != nil {
		return PartitionReport{}, err
	}
	for i, part := range []model.Partition{pr.Split, pr.Even} {
		res, sr, mem, err := auto.EvaluateSplit(res.Config, mustOptions(one), sp, part)
		if err != nil {
			return PartitionReport{}, err
		}
		c, err := price.Split(part, copies)
		if err != nil {
			return PartitionReport{}, err
		}
		lb, err := sim.LowerBound(res.Program, c, sim.BoundOptions{})
		if err != nil {
			return PartitionReport{}, err
		}
		if i == 0 {
			rep.Makespan, rep.Mem, rep.LowerBound = sr.Makespan, mem, lb
		} else {
			rep.EvenMakespan, rep.EvenMem, rep.EvenBound = sr.Makespan, mem, lb
		}
	}
	c, err := pricing.OfModel(m).Split(pr.Split, 1)
	if err != nil {
		return PartitionReport{}, err
	}
	act, params, err := partition.StageMemory(m, pr.Split, 1)
	if err != nil {
		return PartitionReport{}, err
	}
	for s := range pr.Split.Stages() {
		first, end := pr.Split.Bounds[s], pr.Split.Bounds[s+1]
		rep.Stages = append(rep.Stages, PartitionStage{
			Stage: s, Rank: res.Program.Placement.RankOf[s], First: first, End: end,
			Layers: partition.Range(m, first, end),
			F:      at(c.F, s), I: at(c.I, s), W: at(c.W, s), Act: act[s], Params: params[s],
		})
	}
	return rep, nil
}

func at(l []float64, s int) float64 {
	if len(l) == 1 {
		return l[0]
	}
	return l[s]
}

// mustOptions is r's lowering options, which Lower already accepted.
func mustOptions(r Request) gen.Options {
	opt, _ := r.LowerOptions()
	return opt.Options
}
