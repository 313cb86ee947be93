package train

import (
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// towerReplica is a rank's replica of Config.Tower as a pipe.Tower: its
// forward keeps each micro-batch's context until that micro-batch's
// backward, which adds to the parameters' gradients (the gradient of the
// tower's input is not needed).
type towerReplica struct {
	layer  nn.Layer
	params []*nn.Param
	saved  []any // by micro-batch, from Forward to Backward
}

func newTowerReplica(l nn.Layer, micro int) *towerReplica {
	return &towerReplica{layer: l, params: l.Params(), saved: make([]any, micro)}
}

func (t *towerReplica) Forward(m int, x *tensor.Dense) (*tensor.Dense, error) {
	if uint(m) >= uint(len(t.saved)) {
		return nil, fmt.Errorf("tower: micro-batch %d of %d", m, len(t.saved))
	}
	y, saved, err := t.layer.Forward(x)
	if err != nil {
		return nil, err
	}
	t.saved[m] = saved
	return y, nil
}

func (t *towerReplica) Backward(m int, dy *tensor.Dense) error {
	if uint(m) >= uint(len(t.saved)) || t.saved[m] == nil {
		return fmt.Errorf("tower: the backward of micro-batch %d, whose forward did not run on this rank", m)
	}
	saved := t.saved[m]
	t.saved[m] = nil
	return layerBackward(t.layer, saved, dy)
}

// layerBackward adds l's parameter gradients for the output gradient dy
// of the forward that saved saved: its input gradient first (which a
// composite layer's weight gradients need), then its weight gradients.
func layerBackward(l nn.Layer, saved any, dy *tensor.Dense) error {
	if _, err := l.BackwardInput(saved, dy); err != nil {
		return err
	}
	return l.BackwardWeight(saved, dy)
}

func (t *towerReplica) Grads() []*tensor.Dense {
	gs := make([]*tensor.Dense, len(t.params))
	for i, p := range t.params {
		gs[i] = p.Grad
	}
	return gs
}

// frozen is the replica's forward without keeping a context, for the
// eval program (no backward): pipe.WithPreprocess's function.
func (t *towerReplica) frozen(_ int, x *tensor.Dense) (*tensor.Dense, error) {
	y, _, err := t.layer.Forward(x)
	return y, err
}

// checkpointed reports whether checkpoints hold the tower: a replica with
// parameters (nil: none).
func (t *towerReplica) checkpointed() bool { return t != nil && len(t.params) > 0 }

// resumable checks that a job whose replica is t (nil: no tower) resumes
// from a checkpoint of layout l, in dir: both have a tower, or neither.
// The tower's state does not depend on the layout (every rank's replica is
// the same), so any schedule, P, DP or TowerAtFirst reads it.
func (t *towerReplica) resumable(l checkpoint.Layout, dir string) error {
	switch {
	case l.Tower && !t.checkpointed():
		return fmt.Errorf("resume from %s: the checkpoint holds a tower's parameters (its job had a Config.Tower) and this job has no tower with parameters: set Config.Tower to the same tower to resume it (the loop does not drop a trained tower)", dir)
	case !l.Tower && t.checkpointed():
		return fmt.Errorf("resume from %s: this job has a Config.Tower and the checkpoint holds no tower (its job, %v, had none): resume it without Config.Tower, or start the job with the tower afresh", dir, l)
	}
	return nil
}

// buildTower builds the rank's replica of Config.Tower, if any, and adds
// its parameters to the ones the rank steps on; it returns those the
// gradient norm must not count on this rank: every pipeline rank holds
// the same summed gradients, so only pipeline rank 0 counts them.
func (r *rank) buildTower() ([]*nn.Param, error) {
	if r.cfg.Tower == nil {
		return nil, nil
	}
	l, err := r.cfg.Tower()
	if err != nil {
		return nil, fmt.Errorf("train: rank %d: the tower: %w", r.world, err)
	}
	if l == nil {
		return nil, fmt.Errorf("train: rank %d: Config.Tower returned nil", r.world)
	}
	r.tower = newTowerReplica(l, r.cfg.Train.Spec.Micro)
	if r.cfg.CheckpointDir != "" || r.cfg.Resume != "" {
		// A checkpoint names the tower's parameters as its optimizer
		// state does: refuse names it cannot tell apart now, not at the
		// first save.
		if _, err := r.opt.State(r.tower.params); err != nil {
			return nil, fmt.Errorf("train: rank %d: the tower's parameters cannot be checkpointed (give them distinct names: nn.NewSequential prefixes each layer's with its position): %w", r.world, err)
		}
	}
	r.params = append(r.params, r.tower.params...)
	if r.pp != 0 {
		return r.tower.params, nil
	}
	return nil, nil
}

// towerConfig sets cfg's tower for the train program (the replica, which
// pipe runs) or, for the eval program, its forward as a frozen
// preprocess of the data.
func (r *rank) towerConfig(cfg *pipe.Config, eval bool) {
	switch {
	case r.tower == nil:
	case !eval:
		cfg.Tower, cfg.TowerAtFirst = r.tower, r.cfg.TowerAtFirst
	case cfg.Data != nil:
		cfg.Data = pipe.WithPreprocess(cfg.Data, r.tower.frozen)
	}
}
