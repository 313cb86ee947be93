package gencmd

import (
	"os"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/synth"
)

// modelKeys are the cost keys a -model file gives; -cost may not give them
// too.
var modelKeys = map[string]bool{"f": true, "b": true, "i": true, "w": true, "act": true}

// The values of -partition.
const (
	PartitionEven = "even" // the layers split evenly by count (the default)
	PartitionAuto = "auto" // gen/partition's split for the schedule's order
)

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
	return r.SplitCost(m, p, copies)
}

// SplitCost is the cost model of a program of copies model copies whose
// every copy splits m's layers by part (partition.CopyCost), with the
// other keys of -cost. Its errors are *UsageError.
func (r *Request) SplitCost(m model.Model, part model.Partition, copies int) (sim.Cost, error) {
	c, err := partition.CopyCost(m, part, copies)
	if err != nil {
		return sim.Cost{}, usagef("-model %s: %v", r.Model, err)
	}
	if r.Cost == "" {
		return c, nil
	}
	stages := part.Stages() * max(copies, 1)
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

// SplitModel is the -model file as the auto scheduler sees it
// (gen.SplitModel): its costs with -cost's other keys, and with
// -partition auto every family also with gen/partition's split.
func (r *Request) SplitModel() (*gen.SplitModel, error) {
	if err := r.checkPartition(); err != nil {
		return nil, err
	}
	m, err := r.ReadModel()
	if err != nil {
		return nil, err
	}
	return &gen.SplitModel{
		Model:     m,
		Cost:      func(part model.Partition, copies int) (sim.Cost, error) { return r.SplitCost(m, part, copies) },
		Partition: r.Partition == PartitionAuto,
	}, nil
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

// ResultCost is the cost model to simulate a lowered result by: with
// -model, the model's layers split as res records (res.Layers: the split
// auto or -partition chose, or the even one), else StageCost.
func (r *Request) ResultCost(res gen.Result) (sim.Cost, error) {
	copies := max(res.Program.Copies, 1)
	if r.Model == "" || res.Layers == nil {
		return r.StageCost(res.Program.Stages(), copies)
	}
	m, err := r.ReadModel()
	if err != nil {
		return sim.Cost{}, err
	}
	return r.SplitCost(m, model.Partition{Bounds: res.Layers}, copies)
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
	pr, err := partition.Search(sp.Model, res.Compute, partition.Options{
		Cost:     func(part model.Partition) (sim.Cost, error) { return r.SplitCost(sp.Model, part, copies) },
		MemLimit: r.Mem,
	})
	if err != nil {
		return usagef("-model %s -partition auto: %v", r.Model, err)
	}
	res.Layers = pr.Split.Bounds
	return nil
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

// MemoryCap is the memory cap -mem puts on -schedule auto and -partition
// auto, for the lower bound of the lowered result (synth.MemoryCap, for
// synth.LowerBound): with -model, each rank's limit less its stages'
// params, each chunk holding the act of its stage's layers; without, -mem
// times the stages of a rank's share, in chunks. No cap (the zero options)
// without -mem, or for a fixed family's split evenly.
func (r *Request) MemoryCap(res gen.Result) (sim.BoundOptions, error) {
	if !(r.Mem > 0 && (r.Schedule == gen.Auto || r.Partition == PartitionAuto)) {
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

// SmallestChunk is the least activation memory one live chunk of res
// holds, in -mem's units: with a model, the smallest positive act of its
// stages (their layers' acts summed); else 1/V, a chunk of one of V stages
// per rank in micro-batches of a rank's share. 0 when the model cannot be
// read or does not fit res's split.
func (r *Request) SmallestChunk(res gen.Result) float64 {
	if r.Model == "" || res.Layers == nil {
		return 1 / float64(max(res.Config.Virtual, 1))
	}
	m, err := r.ReadModel()
	if err != nil {
		return 0
	}
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
