package train

import (
	"fmt"
	"slices"

	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/checkpoint/nncheckpoint"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/nn"
)

// stageLayer is one stage the rank built: its Sequential and the layer of
// each of its parameters, in order (an FSDP group's members).
type stageLayer struct {
	stage   int
	seq     *nn.Sequential
	wrapped nn.ParamStage // seq, or Config.WrapStage's wrapper of it
	layers  []int
}

// fsdpStage is a stage sharded over the rank's DP group: its FSDP wrapper
// and its members as a checkpoint records them.
type fsdpStage struct {
	name    string
	f       *nn.FSDP
	members []checkpoint.Member
}

// shard cuts the rank's stages over its DP group (Config.FSDP): each
// stage becomes an nn.FSDP holding 1/DP of its flattened parameters,
// which the optimizer steps on. saved, when resuming, holds the layers'
// parameters and optimizer state as the checkpoint had them (the values
// are already in the layers): the shards' optimizer state is cut from
// them as checkpoint.SplitFlat cuts a chunk.
func (r *rank) shard(comm *collective.Comm, saved []checkpoint.Param) error {
	g, err := nn.NewFSDPGroup(comm)
	if err != nil {
		return fmt.Errorf("train: rank %d: %w", r.world, err)
	}
	r.fsdp = g
	for _, sl := range r.stageLayers {
		name := fmt.Sprintf("stage %d", sl.stage)
		ps := sl.seq.Params()
		fs := fsdpStage{name: name}
		for i, p := range ps {
			fs.members = append(fs.members, checkpoint.Member{Layer: sl.layers[i], Name: p.Name, Shape: slices.Clone([]int(p.Value.Shape()))})
		}
		var chunk checkpoint.Flat
		if saved != nil {
			if chunk, err = savedChunk(name, fs.members, saved, r.replica, comm.Size()); err != nil {
				return fmt.Errorf("train: rank %d: resume: %w", r.world, err)
			}
		}
		if fs.f, err = g.Wrap(sl.wrapped, name); err != nil {
			return fmt.Errorf("train: rank %d: %w", r.world, err)
		}
		r.stages[sl.stage] = fs.f.AsStage() // passes pipe.Recomputable on when the stage has it
		r.shards = append(r.shards, fs)
		if saved != nil {
			if err := r.restoreShard(fs.f.Shard, chunk); err != nil {
				return fmt.Errorf("train: rank %d: resume: %s: %w", r.world, name, err)
			}
		}
	}
	r.params = slices.Clone(g.Params())
	r.counted = nn.NormShare{Replica: r.replica, Sharded: true}.Counted(r.params)
	return r.replicateTower(comm)
}

// replicateTower adds, with FSDP, the tower's parameters (Config.Tower) to
// those the rank steps on: the tower is not sharded but replicated, as
// without FSDP, so its gradients (summed over the pipeline at OPT_STEP)
// are all-reduced over the DP group (r.dpar, in reduce, before the norm)
// and counted in the norm once, on pipeline rank 0 of replica 0; step
// steps it beside the shards.
func (r *rank) replicateTower(comm *collective.Comm) error {
	if r.tower == nil || len(r.tower.params) == 0 {
		return nil
	}
	var err error
	if r.dpar, err = nn.NewDataParallel(comm, r.tower.params); err != nil {
		return fmt.Errorf("train: rank %d: the tower: %w", r.world, err)
	}
	r.params = append(r.params, r.tower.params...)
	if r.pp == 0 && r.replica == 0 {
		r.counted = append(r.counted, r.tower.params...)
	}
	return nil
}

// savedChunk returns the chunk index of of the group name (its members)
// from the saved parameters.
func savedChunk(name string, members []checkpoint.Member, saved []checkpoint.Param, index, of int) (checkpoint.Flat, error) {
	type key struct {
		layer int
		name  string
	}
	byKey := map[key]*checkpoint.Param{}
	for i := range saved {
		byKey[key{saved[i].Layer, saved[i].Name}] = &saved[i]
	}
	ps := make([]checkpoint.Param, len(members))
	for i, m := range members {
		p := byKey[key{m.Layer, m.Name}]
		if p == nil {
			return checkpoint.Flat{}, fmt.Errorf("%s: layer %d has no parameter %q in the checkpoint", name, m.Layer, m.Name)
		}
		ps[i] = *p
	}
	return checkpoint.SplitFlat(name, ps, index, of)
}

// restoreShard sets the optimizer state of shard to the chunk's.
func (r *rank) restoreShard(shard *nn.Param, chunk checkpoint.Flat) error {
	pst, err := fromCheckpoint(shard.Value, chunk.State, chunk.Scalars)
	if err != nil {
		return err
	}
	kind, err := r.opt.State(nil)
	if err != nil {
		return err
	}
	return r.opt.SetState([]*nn.Param{shard}, nn.OptimState{Kind: kind.Kind, Params: map[string]nn.ParamState{shard.Name: pst}})
}

// flats returns the rank's FSDP chunks for a checkpoint: each stage's
// shard and its optimizer state, chunk replica of DP.
func (r *rank) flats() ([]checkpoint.Flat, error) {
	var out []checkpoint.Flat
	for _, fs := range r.shards {
		shard := fs.f.Shard
		ost, err := r.opt.State([]*nn.Param{shard})
		if err != nil {
			return nil, fmt.Errorf("train: rank %d: checkpoint of %s: %w", r.world, fs.name, err)
		}
		v, err := nncheckpoint.FromDense(shard.Value)
		if err != nil {
			return nil, fmt.Errorf("train: rank %d: checkpoint of %s: %w", r.world, fs.name, err)
		}
		fl := checkpoint.Flat{Name: fs.name, Members: fs.members, Index: r.replica, Of: r.cfg.DP, Value: v}
		if fl.State, fl.Scalars, err = toCheckpoint(ost.Params[shard.Name]); err != nil {
			return nil, fmt.Errorf("train: rank %d: checkpoint of %s: %w", r.world, fs.name, err)
		}
		out = append(out, fl)
	}
	return out, nil
}
