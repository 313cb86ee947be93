package gencmd

import (
	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/ir"
)

// Compare is `ppgen sim -compare` of the request's flags: gen/auto's
// Compare of entries, each with the shared flags (ranks, micro, lowering
// options), the request's Pricing and, with -partition auto, each
// family's own split of the model's layers.
func (r *Request) Compare(entries []auto.CompareEntry, progress func(name string, done int)) ([]auto.Compared, error) {
	p, err := r.Pricing()
	if err != nil {
		return nil, err
	}
	opt := auto.CompareOptions{Pricing: p, Progress: progress,
		Setup: func(e auto.CompareEntry) (ir.Config, auto.Options, error) {
			one := *r
			fam := e.Family // resolved by auto.ParseCompare
			one.Schedule, one.Virtual = fam.Name, e.Virtual
			one.family = &fam
			if !fam.OwnedData {
				one.MpipeOwners = "" // -mpipe-owners applies to the list's mpipe entries
			}
			cfg, err := one.Config()
			if err != nil {
				return cfg, auto.Options{}, err
			}
			opt, err := one.LowerOptions()
			return cfg, opt, err
		}}
	if r.Partition == PartitionAuto {
		opt.Resplit = func(res *gen.Result) error { return r.splitResult(res) }
	}
	rows, err := auto.Compare(entries, opt)
	return rows, usageOf(err)
}
