package train

import (
	"encoding/json"
	"fmt"
	"slices"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/checkpoint/nncheckpoint"
	"github.com/ppgen/ppgen/runtime/nn"
)

// StateKey is the key of the loop's state in a checkpoint manifest's
// State (checkpoint.Manifest.State): a State as JSON. TrainerStateKey is
// the trainer's own (Config.SaveState).
const (
	StateKey        = "train"
	TrainerStateKey = "trainer"
)

// State is the loop's small state in a checkpoint's manifest: the steps
// taken (which is also the LR schedule's state, nn.Schedule being a
// function of the step, and the data position, Config.Data being a
// function of the step) and the tokens seen.
type State struct {
	Step   int   `json:"step"`
	Tokens int64 `json:"tokens"`
}

// state is State (the unexported name keeps call sites short).
type state = State

// stepScalar is the scalar of a parameter's optimizer state in a
// checkpoint: nn.ParamState.Step (Adam's t).
const stepScalar = "step"

// layout is the checkpoint.Layout of the job: with a tower of parameters,
// Tower (world rank 0 saves it).
func (r *rank) layout() checkpoint.Layout {
	c, sp := r.cfg, r.cfg.Train.Spec
	return checkpoint.Layout{
		Schedule: sp.Schedule, Ranks: sp.Ranks, DP: c.DP, Stages: sp.Stages,
		RankOf: slices.Clone(sp.RankOf), Layers: slices.Clone(c.Layers), Copies: sp.Copies, FSDP: c.FSDP,
		Tower: r.tower.checkpointed(),
	}
}

// save writes the rank's shard of a checkpoint of st into dir: every layer
// it holds (one copy), its parameters and their optimizer state, and on
// world rank 0 the tower's (checkpoint.TowerLayer: the replicas are
// identical, so one copy serves every rank of any layout).
func (r *rank) save(dir string, st state) error {
	var params []checkpoint.Param
	var flats []checkpoint.Flat
	if r.fsdp != nil {
		var err error
		if flats, err = r.flats(); err != nil {
			return err
		}
	}
	saved := r.layers
	if r.fsdp != nil {
		saved = nil // the flats hold them
	}
	if r.world == 0 && r.tower.checkpointed() {
		saved = append(slices.Clone(saved), layerParams{layer: checkpoint.TowerLayer, params: r.tower.params})
	}
	for _, l := range saved {
		ost, err := r.opt.State(l.params)
		if err != nil {
			return fmt.Errorf("train: rank %d: checkpoint of %s: %w", r.world, layerName(l.layer), err)
		}
		for _, p := range l.params {
			v, err := nncheckpoint.FromDense(p.Value)
			if err != nil {
				return fmt.Errorf("train: rank %d: checkpoint of %s parameter %q: %w", r.world, layerName(l.layer), p.Name, err)
			}
			cp := checkpoint.Param{Layer: l.layer, Name: p.Name, Value: v}
			if cp.State, cp.Scalars, err = toCheckpoint(ost.Params[p.Name]); err != nil {
				return fmt.Errorf("train: rank %d: checkpoint of %s parameter %q: %w", r.world, layerName(l.layer), p.Name, err)
			}
			params = append(params, cp)
		}
	}
	js, err := json.Marshal(st)
	if err != nil {
		return err
	}
	states := map[string]json.RawMessage{StateKey: js}
	if f := r.cfg.SaveState; f != nil {
		own, err := f()
		if err != nil {
			return fmt.Errorf("train: rank %d: SaveState: %w", r.world, err)
		}
		if !json.Valid(own) {
			return fmt.Errorf("train: rank %d: SaveState returned invalid JSON (%.40q)", r.world, own)
		}
		states[TrainerStateKey] = own
	}
	var barrier func() error
	if r.wcomm != nil {
		barrier = nncheckpoint.CommBarrier(r.wcomm)
	}
	err = checkpoint.Save(dir, &checkpoint.Shard{Params: params, Flats: flats}, checkpoint.SaveOptions{
		Rank: r.world, Step: int64(st.Step), Layout: r.layout(), Barrier: barrier,
		State: states,
	})
	if err != nil {
		return fmt.Errorf("train: rank %d: %w", r.world, err)
	}
	return nil
}

// restore loads the rank's layers (every copy) and their optimizer state
// from the checkpoint in dir, whatever layout wrote it, and returns the
// loop's state and the saved parameters. With FSDP it restores the values
// only (before the stages are sharded); shard restores the shards'
// optimizer state from the saved parameters.
func (r *rank) restore(dir string) (state, []checkpoint.Param, error) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return state{}, nil, fmt.Errorf("train: resume: %w", err)
	}
	var st state
	raw, ok := ck.Manifest.State[StateKey]
	if !ok {
		return state{}, nil, fmt.Errorf("train: resume from %s: the manifest has no %q state; it was not written by runtime/train", dir, StateKey)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return state{}, nil, fmt.Errorf("train: resume from %s: the manifest's %q state: %w", dir, StateKey, err)
	}
	if st.Step < 0 || int64(st.Step) != ck.Manifest.Step || st.Tokens < 0 {
		return state{}, nil, fmt.Errorf("train: resume from %s: state step %d, tokens %d, manifest step %d", dir, st.Step, st.Tokens, ck.Manifest.Step)
	}
	if f := r.cfg.LoadState; f != nil {
		own, ok := ck.Manifest.State[TrainerStateKey]
		if !ok {
			return state{}, nil, fmt.Errorf("train: resume from %s: the manifest has no %q state for LoadState (the job that saved it had no SaveState)", dir, TrainerStateKey)
		}
		if err := f(own); err != nil {
			return state{}, nil, fmt.Errorf("train: rank %d: resume from %s: LoadState: %w", r.world, dir, err)
		}
	}
	restored := r.layers
	if err := r.tower.resumable(ck.Manifest.Layout, dir); err != nil {
		return state{}, nil, fmt.Errorf("train: rank %d: %w", r.world, err)
	}
	if r.tower.checkpointed() {
		restored = append(slices.Clone(restored), layerParams{layer: checkpoint.TowerLayer, params: r.tower.params})
	}
	want := make([]int, len(restored))
	for i, l := range restored {
		want[i] = l.layer
	}
	got, err := ck.LayersInto(want, r.replica, r.into(restored))
	if err != nil {
		return state{}, nil, fmt.Errorf("train: rank %d: resume: %w", r.world, err)
	}
	byLayer := map[int][]checkpoint.Param{}
	for _, p := range got {
		byLayer[p.Layer] = append(byLayer[p.Layer], p)
	}
	for _, l := range restored {
		for _, ps := range append([][]*nn.Param{l.params}, l.copies...) {
			if err := r.restoreLayer(l.layer, ps, byLayer[l.layer]); err != nil {
				return state{}, nil, fmt.Errorf("train: rank %d: resume from %s: %w", r.world, dir, err)
			}
		}
	}
	return st, slices.DeleteFunc(got, func(p checkpoint.Param) bool { return p.Layer == checkpoint.TowerLayer }), nil
}

// layerName names model layer l in an error, or the tower
// (checkpoint.TowerLayer).
func layerName(l int) string {
	if l == checkpoint.TowerLayer {
		return "the tower"
	}
	return fmt.Sprint("layer ", l)
}

// into gives checkpoint.LayersInto the memory of the parameters of
// layers (each layer's first copy), so that their values are read straight
// into the model; nil with FSDP, whose saved parameters are cut into
// shards after the stages are sharded.
func (r *rank) into(layers []layerParams) func(layer int, name, state string) checkpoint.Tensor {
	if r.cfg.FSDP {
		return nil
	}
	values := map[int]map[string]*nn.Param{}
	for _, l := range layers {
		values[l.layer] = map[string]*nn.Param{}
		for _, p := range l.params {
			values[l.layer][p.Name] = p
		}
	}
	return func(layer int, name, state string) checkpoint.Tensor {
		p := values[layer][name]
		if state != "" || p == nil {
			return checkpoint.Tensor{}
		}
		t, err := nncheckpoint.FromDense(p.Value)
		if err != nil {
			return checkpoint.Tensor{} // restoreLayer reports it
		}
		return t
	}
}

// restoreLayer copies layer's saved values and optimizer state into ps.
func (r *rank) restoreLayer(layer int, ps []*nn.Param, saved []checkpoint.Param) error {
	byName := map[string]*checkpoint.Param{}
	for i := range saved {
		byName[saved[i].Name] = &saved[i]
	}
	if len(byName) != len(ps) {
		return fmt.Errorf("%s: the checkpoint holds %d parameters, the model %d", layerName(layer), len(byName), len(ps))
	}
	ost := nn.OptimState{Params: map[string]nn.ParamState{}}
	for _, p := range ps {
		src := byName[p.Name]
		if src == nil {
			return fmt.Errorf("%s: no parameter %q in the checkpoint", layerName(layer), p.Name)
		}
		if err := nncheckpoint.CopyInto(p.Value, src.Value); err != nil {
			return fmt.Errorf("%s parameter %q: %w", layerName(layer), p.Name, err)
		}
		pst, err := fromCheckpoint(p.Value, src.State, src.Scalars)
		if err != nil {
			return fmt.Errorf("%s parameter %q: %w", layerName(layer), p.Name, err)
		}
		ost.Params[p.Name] = pst
	}
	if r.cfg.FSDP && layer != checkpoint.TowerLayer {
		return nil // the shards' state is set once they are cut (shard); the tower is not sharded
	}
	kind, err := r.opt.State(nil)
	if err != nil {
		return err
	}
	ost.Kind = kind.Kind
	if err := r.opt.SetState(ps, ost); err != nil {
		return fmt.Errorf("%s: %w", layerName(layer), err)
	}
	return nil
}

// toCheckpoint returns a parameter's optimizer state as a checkpoint
// holds it: its buffers by name, sorted, and its step count.
func toCheckpoint(ps nn.ParamState) ([]checkpoint.NamedTensor, map[string]float64, error) {
	names := make([]string, 0, len(ps.Buffers))
	for n := range ps.Buffers {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []checkpoint.NamedTensor
	for _, n := range names {
		t, err := nncheckpoint.FromDense(ps.Buffers[n])
		if err != nil {
			return nil, nil, fmt.Errorf("state %q: %w", n, err)
		}
		out = append(out, checkpoint.NamedTensor{Name: n, Tensor: t})
	}
	return out, map[string]float64{stepScalar: float64(ps.Step)}, nil
}

// fromCheckpoint returns the optimizer state a checkpoint holds for a
// parameter of like's shape and dtype: copies of its tensors.
func fromCheckpoint(like *tensor.Dense, state []checkpoint.NamedTensor, scalars map[string]float64) (nn.ParamState, error) {
	pst := nn.ParamState{Step: int(scalars[stepScalar])}
	for _, nt := range state {
		t := tensor.New(tensor.Of(like.Dtype()), tensor.WithShape(like.Shape()...))
		if err := nncheckpoint.CopyInto(t, nt.Tensor); err != nil {
			return pst, fmt.Errorf("state %q: %w", nt.Name, err)
		}
		if pst.Buffers == nil {
			pst.Buffers = map[string]*tensor.Dense{}
		}
		pst.Buffers[nt.Name] = t
	}
	return pst, nil
}
