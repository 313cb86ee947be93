package gencmd

import (
	"errors"

	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/partition"
)

// Compare is `ppgen sim -compare` of the request's flags: gen/auto's
// Compare of entries, each with the shared flags (ranks, micro, lowering
// options), the request's Pricing and, with -partition auto, each
// family's own split of the model's layers, and under -mem without
// -recompute the policy chosen with it (lowerPartitioned).
func (r *Request) Compare(entries []auto.CompareEntry, progress func(name string, done int)) ([]auto.Compared, error) {
	p, err := r.Pricing()
	if err != nil {
		return nil, err
	}
	opt := auto.CompareOptions{Pricing: p, Progress: progress,
		Setup: func(e auto.CompareEntry) (ir.Config, auto.Options, error) {
			one := r.entry(e)
			cfg, err := one.Config()
			if err != nil {
				return cfg, auto.Options{}, err
			}
			opt, err := one.LowerOptions()
			return cfg, opt, err
		}}
	if r.Partition == PartitionAuto {
		// Each family as `-schedule FAMILY -partition auto` lowers it:
		// its own split, and under -mem the recompute policy chosen with it.
		opt.Lower = func(e auto.CompareEntry, cfg ir.Config, lo auto.Options) (auto.Result, error) {
			one := r.entry(e)
			res, err := one.lowerPartitionedRaw(cfg, lo.Options)
			if nf := (*partition.NoFitError)(nil); errors.As(err, &nf) {
				// A row that says so, not the end of the comparison.
				return res, &auto.SkipError{Reason: err.Error()}
			}
			if se := (*searchError)(nil); errors.As(err, &se) {
				err = usagef("-model %s -partition auto: %v", r.Model, err)
			}
			return res, err
		}
	}
	rows, err := auto.Compare(entries, opt)
	return rows, usageOf(err)
}

// entry is the request for one entry of a -compare list: the shared flags
// with the entry's family and V.
func (r *Request) entry(e auto.CompareEntry) *Request {
	one := *r
	fam := e.Family // resolved by auto.ParseCompare
	one.Schedule, one.Virtual = fam.Name, e.Virtual
	one.family = &fam
	if !fam.OwnedData {
		one.MpipeOwners = "" // -mpipe-owners applies to the list's mpipe entries
	}
	return &one
}
