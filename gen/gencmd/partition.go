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
	rep, pol, err := chooseRecompute(m, r.Passes["recompute"], r.Mem, func(pol string) (partition.Report, float64, error) {
		rep, err := one.partitionWith(m, pol, r.Mem)
		return rep, rep.Makespan, err
	})
	rep.RecomputeChosen = pol != ""
	return rep, r.partitionErr(err)
}

// chooseRecompute is how a split of the model m's layers chooses its
// -recompute policy under -mem, for `ppgen partition` and for -partition
// auto on a family alike: try splits with one policy ("" for none) and
// returns its result and makespan. With a policy given (none included),
// or without a limit (mem 0), it runs try with the given one alone, and
// chosen is "". Else each of partitionPolicies that fits where none does
// not (a *partition.NoFitError), or fits with a faster split, competes;
// the fastest wins, the first of equals (none before any), and chosen
// names it ("" when none won). Any other error of none's try is returned
// as it is.
func chooseRecompute[T any](m model.Model, given string, mem float64, try func(policy string) (T, float64, error)) (best T, chosen string, err error) {
	best, makespan, err := try(given)
	var nofit *partition.NoFitError
	if given != "" || mem <= 0 || (err != nil && !errors.As(err, &nofit)) {
		return best, "", err
	}
	for _, pol := range partitionPolicies(m) {
		got, gotSpan, perr := try(pol)
		if perr != nil {
			continue // no split fits with it either, or the policy does not apply to this model
		}
		if err != nil || gotSpan < makespan-1e-9*max(1, makespan) {
			best, makespan, chosen, err = got, gotSpan, pol, nil
		}
	}
	if err != nil {
		err = fmt.Errorf("%w; nor with -recompute %s", err, strings.Join(partitionPolicies(m), ", "))
	}
	return best, chosen, err
}

// partitionPolicies are the -recompute policies chooseRecompute tries
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
