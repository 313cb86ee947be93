package gencmd

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

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
	given := r.Passes["recompute"]
	rep, err := one.partitionWith(m, given, r.Mem)
	var nofit *partition.NoFitError
	if given != "" || r.Mem <= 0 || (err != nil && !errors.As(err, &nofit)) {
		return rep, r.partitionErr(err)
	}
	// Under -mem without -recompute, partition chooses the policy with the
	// split, as auto does: each of partitionPolicies that fits where none
	// does not, or fits with a faster split, competes; the fastest wins
	// (the first of equals: none before any).
	best, bestErr := rep, err
	for _, pol := range partitionPolicies(m) {
		prep, perr := one.partitionWith(m, pol, r.Mem)
		if perr != nil {
			continue // no split fits with it either, or the policy does not apply to this model
		}
		if bestErr != nil || prep.Makespan < best.Makespan-1e-9*max(1, best.Makespan) {
			prep.Recompute, prep.RecomputeChosen = pol, true
			best, bestErr = prep, nil
		}
	}
	if bestErr != nil {
		bestErr = fmt.Errorf("%w; nor with -recompute %s", bestErr, strings.Join(partitionPolicies(m), ", "))
	}
	return best, r.partitionErr(bestErr)
}

// partitionPolicies are the -recompute policies `ppgen partition` tries
// under -mem when none is given, after none: the layers the model marks
// (when it marks any), half of every stage's layers, every stage whole.
func partitionPolicies(m model.Model) []string {
	var pols []string
	if slices.ContainsFunc(m.Layers, func(l model.Layer) bool { return l.Recompute }) {
		pols = append(pols, "model")
	}
	return append(pols, "selective:0.5", "full")
}

// partitionErr gives an error of PartitionLayers the -model flag's
// context, unless it is a usage error already.
func (r *Request) partitionErr(err error) error {
	var ue *UsageError
	if err != nil && !errors.As(err, &ue) {
		return usagef("-model %s: %v", r.Model, err)
	}
	return err
}

// partitionWith is PartitionLayers for the request one (its schedule and
// micro-batches settled, the even split) with the -recompute policy
// recompute and the memory limit mem.
func (one Request) partitionWith(m model.Model, recompute string, mem float64) (partition.Report, error) {
	one.Passes = maps.Clone(one.Passes)
	if one.Passes == nil {
		one.Passes = map[string]string{}
	}
	one.Passes["recompute"] = recompute
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
	}, partition.Options{Cost: cost, MemLimit: mem, Program: auto.SplitRecompute(recompute, m)})
	rep.Recompute = recompute
	return rep, err
}
