package gencmd

import (
	"errors"

	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/sim"
)

// DefaultPartitionSchedule is the family `ppgen partition` splits for
// without -schedule, and DefaultPartitionScheduleV the one with -virtual
// V > 1 (1f1b takes only V = 1).
const (
	DefaultPartitionSchedule  = "1f1b"
	DefaultPartitionScheduleV = "interleaved"
)

// PartitionLayers lowers the schedule of the flags (-schedule, default
// DefaultPartitionSchedule, or DefaultPartitionScheduleV with -virtual
// V > 1; -micro, default 2·ranks) and splits the -model file's layers into
// its stages by gen/partition's Compare: the split Search finds for its
// compute order within -mem (the model's units), against the even one,
// each lowered and simulated.
func (r *Request) PartitionLayers() (partition.Report, error) {
	if r.Model == "" {
		return partition.Report{}, usagef("missing -model FILE: the model description whose layers to split (docs/model.md)")
	}
	one := *r
	if one.Schedule == "" {
		one.Schedule = DefaultPartitionSchedule
		if one.Virtual > 1 {
			one.Schedule = DefaultPartitionScheduleV
		}
	}
	if one.Schedule == auto.Name {
		return partition.Report{}, usagef("-schedule auto: partition splits for one family's order; name it (ppgen sim -schedule auto -model FILE -partition auto tries every family with its split)")
	}
	if one.Micro == 0 && one.Ranks > 0 {
		one.Micro = 2 * one.Ranks
	}
	one.Partition, one.Mem = PartitionEven, 0
	m, err := one.ReadModel()
	if err != nil {
		return partition.Report{}, err
	}
	res, err := one.Lower()
	if err != nil {
		return partition.Report{}, err
	}
	price, err := one.Pricing()
	if err != nil {
		return partition.Report{}, err
	}
	opt, err := one.LowerOptions()
	if err != nil {
		return partition.Report{}, err
	}
	copies := partition.Copies(res.Compute)
	cost := func(part model.Partition) (sim.Cost, error) { return price.Split(part, copies) }
	sp, err := auto.NewSplitModel(price, false)
	if err != nil {
		return partition.Report{}, err
	}
	rep, err := partition.Compare(m, partition.Schedule{
		Config:  res.Config,
		Compute: res.Compute,
		Lower: func(part model.Partition) (ir.Program, float64, float64, error) {
			res, sr, mem, err := auto.EvaluateSplit(res.Config, opt.Options, sp, part)
			return res.Program, sr.Makespan, mem, err
		},
	}, partition.Options{Cost: cost, MemLimit: r.Mem, Program: auto.SplitRecompute(one.Passes["recompute"], m)})
	var ue *UsageError
	if err != nil && !errors.As(err, &ue) {
		err = usagef("-model %s: %v", r.Model, err)
	}
	return rep, err
}
