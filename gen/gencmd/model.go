package gencmd

import (
	"errors"
	"maps"
	"os"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/pricing"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/synth"
)

// The values of -partition.
const (
	PartitionEven = "even" // the layers split evenly by count (the default)
	PartitionAuto = "auto" // gen/partition's split for the schedule's order
)

// Pricing is the command line's price list: -cost and -model
// (pricing.Pricing, which says how they combine), built once per -cost and
// -model and kept for every question later calls ask of it. Reading the
// -model file is its only error.
func (r *Request) Pricing() (*pricing.Pricing, error) {
	key := [4]string{r.Cost, r.Model, r.Env.Dir, r.MpipePre}
	if r.pricing != nil && r.pricedFor == key {
		return r.pricing, nil
	}
	var m *model.Model
	pre, preB := 0.0, 0.0
	if r.Model != "" {
		read, f, b, err := r.readModel()
		if err != nil {
			return nil, err
		}
		m, pre, preB = &read, f, b
	} else if r.MpipePre != "" {
		return nil, usagef("-mpipe-pre %s names layers of a -model file (the first T layers, or the layers through a named one); give -model FILE", r.MpipePre)
	}
	r.pricing, r.pricedFor = pricing.NewPreprocess(r.Cost, m, r.Model, pre, preB), key
	return r.pricing, nil
}

// usageOf is err as a *UsageError when it is bad -cost or -model input
// (*pricing.Error).
func usageOf(err error) error {
	if pe := (*pricing.Error)(nil); errors.As(err, &pe) {
		return &UsageError{Msg: err.Error()}
	}
	return err
}

// SplitModel is the -model file as the auto scheduler sees it
// (auto.SplitModel): priced by Pricing, and with -partition auto every
// family also with gen/partition's split.
func (r *Request) SplitModel() (*auto.SplitModel, error) {
	if err := r.checkPartition(); err != nil {
		return nil, err
	}
	p, err := r.Pricing()
	if err != nil {
		return nil, err
	}
	return auto.NewSplitModel(p, r.Partition == PartitionAuto)
}

func (r *Request) checkPartition() error {
	switch r.Partition {
	case "", PartitionEven, PartitionAuto:
	default:
		return usagef("-partition %q; want even (the layers split evenly by count) or auto (the split that minimises the schedule's simulated makespan within -mem)", r.Partition)
	}
	if r.Partition != "" && r.Model == "" {
		return usagef("-partition %s splits the layers of a -model file; give -model FILE", r.Partition)
	}
	return nil
}

// splitResult records in res the split of the model's layers it runs
// (res.Layers): with -partition auto the one gen/partition finds for its
// compute order within -mem, else the even one. Auto's choice already
// carries its own.
func (r *Request) splitResult(res *gen.Result) error {
	if r.Model == "" || res.Layers != nil {
		return nil
	}
	sp, err := r.SplitModel()
	if err != nil {
		return err
	}
	copies := max(res.Program.Copies, 1)
	if res.Program.Stages()%copies != 0 {
		return usagef("-model %s: %d stages do not form %d model copies", r.Model, res.Program.Stages(), copies)
	}
	n := res.Program.Stages() / copies
	if !sp.Partition {
		part, err := model.Even(len(sp.Model.Layers), n)
		if err != nil {
			return usagef("-model %s: %v", r.Model, err)
		}
		res.Layers = part.Bounds
		return nil
	}
	bounds, err := searchSplit(sp, res.Compute, r.Passes["recompute"], r.Mem)
	if err != nil {
		return usagef("-model %s -partition auto: %v", r.Model, err)
	}
	res.Layers = bounds
	return nil
}

// lowerPartitioned is Lower for a family with -partition auto: the family
// lowered with the split gen/partition finds for its compute order within
// -mem, its transfers laid out again for that split. Under -mem without
// -recompute it chooses the policy with the split as `ppgen partition`
// does (chooseRecompute), lowers the program with it and names it in
// Result.Recompute ("" when none was chosen).
func (r *Request) lowerPartitioned(cfg ir.Config, opt gen.Options) (auto.Result, error) {
	res, err := r.lowerPartitionedRaw(cfg, opt)
	if se := (*searchError)(nil); errors.As(err, &se) {
		err = usagef("-model %s -partition auto: %v", r.Model, err)
	}
	return res, err
}

// lowerPartitionedRaw is lowerPartitioned with the split search's errors
// as they are (a *searchError, wrapping a *partition.NoFitError where no
// split fits -mem).
func (r *Request) lowerPartitionedRaw(cfg ir.Config, opt gen.Options) (auto.Result, error) {
	m, err := r.pricedModel()
	if err != nil {
		return auto.Result{}, err
	}
	given := r.Passes["recompute"]
	res, pol, err := chooseRecompute(m, given, r.Mem, func(pol string) (gen.Result, float64, error) {
		if pol == given {
			return r.lowerSplit(cfg, opt)
		}
		one := *r
		one.Passes = maps.Clone(r.Passes)
		if one.Passes == nil {
			one.Passes = map[string]string{}
		}
		one.Passes["recompute"] = pol
		popt, err := one.LowerOptions()
		if err != nil {
			return gen.Result{}, 0, err
		}
		return one.lowerSplit(cfg, popt.Options)
	})
	return auto.Result{Result: res, Recompute: pol}, err
}

// lowerSplit lowers the family with opt, finds the split of the -model's
// layers for its compute order within -mem (searchSplit, its errors a
// *searchError), and lowers it again with the transfers (and -recompute
// model's marks) of that split: the result and its simulated makespan
// with the layers so split.
func (r *Request) lowerSplit(cfg ir.Config, opt gen.Options) (gen.Result, float64, error) {
	res, err := r.lowerFamily(cfg, opt)
	if err != nil {
		return res, 0, err
	}
	sp, err := r.SplitModel()
	if err != nil {
		return res, 0, err
	}
	bounds, err := searchSplit(sp, res.Compute, r.Passes["recompute"], r.Mem)
	if err != nil {
		return res, 0, &searchError{err}
	}
	part := model.Partition{Bounds: bounds}
	opt.CommCost = sp.Pricing.CommSplit(bounds)
	if opt.Passes.Marked != nil { // -recompute model: the split's marks
		opt.Passes.Marked = sp.Model.MarksOf(part)
	}
	again, err := r.lowerFamily(cfg, opt)
	if err != nil {
		return res, 0, err
	}
	again.Layers = bounds
	c, err := sp.Pricing.Split(part, partition.Copies(again.Program))
	if err != nil {
		return again, 0, err
	}
	sr, err := sim.Run(again.Program, c)
	return again, sr.Makespan, err
}

// searchError is an error of the split search in lowerSplit: the -model
// and -mem do not admit a split, which Lower reports as a usage error.
type searchError struct{ err error }

func (e *searchError) Error() string { return e.err.Error() }
func (e *searchError) Unwrap() error { return e.err }

// searchSplit is the split gen/partition's Search finds of the model sp
// prices for the compute order compute, lowered with the -recompute policy
// recompute, within the memory limit mem (0: none).
func searchSplit(sp *auto.SplitModel, compute ir.Program, recompute string, mem float64) ([]int, error) {
	copies := partition.Copies(compute)
	pr, err := partition.Search(sp.Model, compute, partition.Options{
		Cost:     func(part model.Partition) (sim.Cost, error) { return sp.Pricing.Split(part, copies) },
		MemLimit: mem,
		Program:  auto.SplitRecompute(recompute, sp.Model),
	})
	return pr.Split.Bounds, err
}

// ReadModel reads the -model file (relative to Env.Dir; "-" for stdin):
// the layers the stages split, without the preprocess -mpipe-pre takes
// out of them.
func (r *Request) ReadModel() (model.Model, error) {
	m, _, _, err := r.readModel()
	return m, err
}

// readModel is ReadModel and the forward and backward costs of the
// -mpipe-pre layers (0 without -mpipe-pre).
func (r *Request) readModel() (model.Model, float64, float64, error) {
	f := os.Stdin
	if r.Model != "-" {
		var err error
		if f, err = os.Open(resolve(r.Env.Dir, r.Model)); err != nil {
			return model.Model{}, 0, 0, usagef("reading -model: %v", err)
		}
		defer f.Close()
	}
	m, err := model.Read(f)
	if err != nil {
		return model.Model{}, 0, 0, usagef("-model %s: %v", r.Model, err)
	}
	if r.MpipePre == "" {
		return m, 0, 0, nil
	}
	t, err := m.Preprocess(r.MpipePre)
	if err != nil {
		return model.Model{}, 0, 0, usagef("-mpipe-pre %s with -model %s: %v", r.MpipePre, r.Model, err)
	}
	pre, preB, body := m.SplitPreprocess(t)
	r.preLayers = t
	return body, pre, preB, nil
}

// MemoryCap is the memory cap -mem puts on -schedule auto and -partition
// auto, for the lower bound of the lowered result (synth.MemoryCap, for
// synth.LowerBound): with -model, each rank's limit less its stages'
// params, each chunk holding the act of its stage's layers; without, -mem
// times the stages of a rank's share, in chunks. No cap (the zero options)
// without -mem, or for a fixed family's split evenly.
func (r *Request) MemoryCap(res gen.Result) (sim.BoundOptions, error) {
	if !(r.Mem > 0 && (r.Schedule == auto.Name || r.Partition == PartitionAuto)) {
		return sim.BoundOptions{}, nil
	}
	if r.Model == "" || res.Layers == nil {
		return synth.MemoryCap(res.Program.Placement, r.Mem*float64(res.StagesPerShare()), nil, nil)
	}
	m, err := r.ReadModel()
	if err != nil {
		return sim.BoundOptions{}, err
	}
	copies := max(res.Program.Copies, 1)
	act, params, err := partition.StageMemory(m, model.Partition{Bounds: res.Layers}, copies)
	if err == nil {
		var opt sim.BoundOptions
		if opt, err = synth.MemoryCap(res.Program.Placement, r.Mem, act, params); err == nil {
			return opt, nil
		}
	}
	return sim.BoundOptions{}, usagef("-model %s: the split %v does not fit %d stages of %d copies", r.Model, res.Layers, res.Program.Stages(), copies)
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

// SmallestChunk is the least activation memory one live chunk of res
// holds, in -mem's units: with a model, the smallest positive act of its
// stages (their layers' acts summed); else 1/V, a chunk of one of V stages
// per rank in micro-batches of a rank's share. 0 when the model cannot be
// read or does not fit res's split.
func (r *Request) SmallestChunk(res gen.Result) float64 {
	if r.Model == "" || res.Layers == nil {
		return 1 / float64(max(res.Config.Virtual, 1))
	}
	p, err := r.Pricing()
	if err != nil {
		return 0
	}
	m, _ := p.Model()
	act, _, err := partition.StageMemory(m, model.Partition{Bounds: res.Layers}, max(res.Program.Copies, 1))
	if err != nil {
		return 0
	}
	least := 0.0
	for _, a := range act {
		if a > 0 && (least == 0 || a < least) {
			least = a
		}
	}
	return least
}

// markedLayers lets -recompute model (and selective:S=model) find the
// layers the -model file marks (passes.Options.Marked), split as gen
// records them in Spec.Layers: evenly over one model copy's stages, stage
// s running the layers of stage s mod (stages/copies). -schedule auto and
// -partition auto set the marks of each split they lower themselves
// (auto.EvaluateSplit, Lower).
func (r *Request) markedLayers(opt *passes.Options) error {
	if r.Model == "" || !strings.Contains(r.Passes["recompute"], "model") {
		return nil // the pass says -model is missing, when it needs it
	}
	m, err := r.pricedModel()
	if err != nil {
		return err
	}
	opt.Marked = m.EvenMarks
	return nil
}

// pricedModel is the -model file's model as Pricing read it: read once,
// so that -model - (stdin) serves every use.
func (r *Request) pricedModel() (model.Model, error) {
	p, err := r.Pricing()
	if err != nil {
		return model.Model{}, err
	}
	m, ok := p.Model()
	if !ok {
		return model.Model{}, usagef("-model %s: no model read", r.Model)
	}
	return m, nil
}
