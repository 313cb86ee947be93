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

// layout is the checkpoint.Layout of the job.
func (c Config) layout() checkpoint.Layout {
	sp := c.Train.Spec
	return checkpoint.Layout{
		Schedule: sp.Schedule, Ranks: sp.Ranks, DP: c.DP, Stages: sp.Stages,
		RankOf: slices.Clone(sp.RankOf), Layers: slices.Clone(c.Layers), Copies: sp.Copies,
	}
}

// save writes the rank's shard of a checkpoint of st into dir: every layer
// it holds (one copy), its parameters and their optimizer state.
func (r *rank) save(dir string, st state) error {
	var params []checkpoint.Param
	for _, l := range r.layers {
		ost, err := r.opt.State(l.params)
		if err != nil {
			return fmt.Errorf("train: rank %d: checkpoint of layer %d: %w", r.world, l.layer, err)
		}
		for _, p := range l.params {
			v, err := nncheckpoint.FromDense(p.Value)
			if err != nil {
				return fmt.Errorf("train: rank %d: checkpoint of layer %d parameter %q: %w", r.world, l.layer, p.Name, err)
			}
			cp := checkpoint.Param{Layer: l.layer, Name: p.Name, Value: v}
			ps := ost.Params[p.Name]
			cp.Scalars = map[string]float64{stepScalar: float64(ps.Step)}
			names := make([]string, 0, len(ps.Buffers))
			for n := range ps.Buffers {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				t, err := nncheckpoint.FromDense(ps.Buffers[n])
				if err != nil {
					return fmt.Errorf("train: rank %d: checkpoint of layer %d parameter %q state %q: %w", r.world, l.layer, p.Name, n, err)
				}
				cp.State = append(cp.State, checkpoint.NamedTensor{Name: n, Tensor: t})
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
	err = checkpoint.Save(dir, &checkpoint.Shard{Params: params}, checkpoint.SaveOptions{
		Rank: r.world, Step: int64(st.Step), Layout: r.cfg.layout(), Barrier: barrier,
		State: states,
	})
	if err != nil {
		return fmt.Errorf("train: rank %d: %w", r.world, err)
	}
	return nil
}

// restore loads the rank's layers (every copy) and their optimizer state
// from the checkpoint in dir, whatever layout wrote it, and returns the
// loop's state.
func (r *rank) restore(dir string) (state, error) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return state{}, fmt.Errorf("train: resume: %w", err)
	}
	var st state
	raw, ok := ck.Manifest.State[StateKey]
	if !ok {
		return state{}, fmt.Errorf("train: resume from %s: the manifest has no %q state; it was not written by runtime/train", dir, StateKey)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return state{}, fmt.Errorf("train: resume from %s: the manifest's %q state: %w", dir, StateKey, err)
	}
	if st.Step < 0 || int64(st.Step) != ck.Manifest.Step || st.Tokens < 0 {
		return state{}, fmt.Errorf("train: resume from %s: state step %d, tokens %d, manifest step %d", dir, st.Step, st.Tokens, ck.Manifest.Step)
	}
	if f := r.cfg.LoadState; f != nil {
		own, ok := ck.Manifest.State[TrainerStateKey]
		if !ok {
			return state{}, fmt.Errorf("train: resume from %s: the manifest has no %q state for LoadState (the job that saved it had no SaveState)", dir, TrainerStateKey)
		}
		if err := f(own); err != nil {
			return state{}, fmt.Errorf("train: rank %d: resume from %s: LoadState: %w", r.world, dir, err)
		}
	}
	want := make([]int, len(r.layers))
	for i, l := range r.layers {
		want[i] = l.layer
	}
	got, err := ck.Layers(want, r.replica)
	if err != nil {
		return state{}, fmt.Errorf("train: rank %d: resume: %w", r.world, err)
	}
	byLayer := map[int][]checkpoint.Param{}
	for _, p := range got {
		byLayer[p.Layer] = append(byLayer[p.Layer], p)
	}
	for _, l := range r.layers {
		for _, ps := range append([][]*nn.Param{l.params}, l.copies...) {
			if err := r.restoreLayer(l.layer, ps, byLayer[l.layer]); err != nil {
				return state{}, fmt.Errorf("train: rank %d: resume from %s: %w", r.world, dir, err)
			}
		}
	}
	return st, nil
}

// restoreLayer copies layer's saved values and optimizer state into ps.
func (r *rank) restoreLayer(layer int, ps []*nn.Param, saved []checkpoint.Param) error {
	byName := map[string]*checkpoint.Param{}
	for i := range saved {
		byName[saved[i].Name] = &saved[i]
	}
	if len(byName) != len(ps) {
		return fmt.Errorf("layer %d: the checkpoint holds %d parameters, the model %d", layer, len(byName), len(ps))
	}
	ost := nn.OptimState{Params: map[string]nn.ParamState{}}
	for _, p := range ps {
		src := byName[p.Name]
		if src == nil {
			return fmt.Errorf("layer %d: no parameter %q in the checkpoint", layer, p.Name)
		}
		if err := nncheckpoint.CopyInto(p.Value, src.Value); err != nil {
			return fmt.Errorf("layer %d parameter %q: %w", layer, p.Name, err)
		}
		pst := nn.ParamState{Step: int(src.Scalars[stepScalar])}
		for _, nt := range src.State {
			t := tensor.New(tensor.Of(p.Value.Dtype()), tensor.WithShape(p.Value.Shape()...))
			if err := nncheckpoint.CopyInto(t, nt.Tensor); err != nil {
				return fmt.Errorf("layer %d parameter %q state %q: %w", layer, p.Name, nt.Name, err)
			}
			if pst.Buffers == nil {
				pst.Buffers = map[string]*tensor.Dense{}
			}
			pst.Buffers[nt.Name] = t
		}
		ost.Params[p.Name] = pst
	}
	kind, err := r.opt.State(nil)
	if err != nil {
		return err
	}
	ost.Kind = kind.Kind
	if err := r.opt.SetState(ps, ost); err != nil {
		return fmt.Errorf("layer %d: %w", layer, err)
	}
	return nil
}
