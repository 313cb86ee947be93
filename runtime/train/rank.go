package train

import (
	"fmt"
	"slices"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/checkpoint/nncheckpoint"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/mesh"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/world"
)

// layerParams is one model layer a rank holds and its parameters, as
// saved in a checkpoint (one copy of each layer per rank).
type layerParams struct {
	layer  int
	params []*nn.Param
	copies [][]*nn.Param // the layer's other copies on this rank (dualpipe), restored alike
}

// rank is one world rank's share of the job: its stages, optimizer,
// communicators and executors.
type rank struct {
	world, pp, replica int
	cfg                Config
	stages             map[int]pipe.Stage
	params             []*nn.Param // every parameter the rank steps on
	counted            []*nn.Param // those it counts in the gradient norm
	layers             []layerParams
	opt                nn.Optimizer
	dpar               *nn.DataParallel // DP > 1
	dpComm             *collective.Comm // the data-parallel group's; nil for DP = 1
	wcomm              *collective.Comm // the whole world's; nil for one rank
	train, eval        *pipe.Exec
	data, edata        *source
	reads              bool          // the rank reads micro-batches
	norm               float64       // this step's gradient norm
	fsdp               *nn.FSDPGroup // Config.FSDP: the stages sharded over the DP group
	shards             []fsdpStage
	resumed            *state // the checkpoint's, when resumed
	reduced            bool   // the program's ALL_REDUCE hook did this step's reduction
	stageLayers        []stageLayer
	tower              *towerReplica // Config.Tower's replica on this rank
	owned              *ownedSource  // the train program's data, nil on a rank that reads none
	first              bool          // the process's first rank
	local              []int         // the pipeline ranks of the process's ranks (Config.Timeline's)
}

// tiedLayer is a layer that declares tied parameters (nn.TiedStage).
type tiedLayer interface {
	TiedParams() []*nn.Param
}

// tiedStage is a stage of a tie: runtime/pipe's Tied.
type tiedStage struct {
	nn.ParamStage
	tied []*nn.Param
}

// Release passes a forward-only context on to the stage it wraps, where
// that is a pipe.Releaser.
func (s *tiedStage) Release(saved any) error {
	if r, ok := s.ParamStage.(pipe.Releaser); ok {
		return r.Release(saved)
	}
	return nil
}

// newTiedStage returns st as a stage of a tie whose tied parameters are
// tied: one that passes on pipe.Recomputable when st has it, and does not
// claim it otherwise.
func newTiedStage(st nn.ParamStage, tied []*nn.Param) pipe.Stage {
	t := &tiedStage{ParamStage: st, tied: tied}
	if rs, ok := st.(pipe.Recomputable); ok {
		return &recomputingTied{tiedStage: t, Recomputable: rs}
	}
	return t
}

// recomputingTied is a tiedStage whose stage is a pipe.Recomputable: the
// embedded Recomputable passes Select, Drop and Rebuild to it.
type recomputingTied struct {
	*tiedStage
	pipe.Recomputable
}

func (s *tiedStage) TiedGrads() []*tensor.Dense {
	gs := make([]*tensor.Dense, len(s.tied))
	for i, p := range s.tied {
		gs[i] = p.Grad
	}
	return gs
}

// source is a pipe.DataSource whose micro-batches the loop changes between
// steps.
type source struct{ cur pipe.DataSource }

func (s *source) Input(m int) (*tensor.Dense, error)  { return s.cur.Input(m) }
func (s *source) Target(m int) (*tensor.Dense, error) { return s.cur.Target(m) }

// newRank builds world rank ep.Rank()'s stages and executors over ep, an
// endpoint of wd.
func newRank(c Config, m mesh.Mesh, wd *world.World, ep transport.Transport) (*rank, error) {
	sp := c.Train.Spec
	r := &rank{world: ep.Rank(), cfg: c, stages: map[int]pipe.Stage{}, opt: c.Optimizer()}
	r.pp, r.replica = m.Coords(r.world)
	pipeT, dpT := ep, transport.Transport(nil)
	if m.DP > 1 {
		var err error
		if pipeT, dpT, err = m.Groups(ep); err != nil {
			return nil, err
		}
	}
	if wd.Size > 1 {
		var err error
		if r.wcomm, err = wd.NewComm(ep, abi.DataChannel); err != nil {
			return nil, fmt.Errorf("train: rank %d: the world's collectives: %w", r.world, err)
		}
	}
	if err := r.build(); err != nil {
		return nil, err
	}
	var saved []checkpoint.Param // the resumed checkpoint's parameters of the rank's layers
	if c.Resume != "" {
		st, got, err := r.restore(c.Resume)
		if err != nil {
			return nil, err
		}
		r.resumed, saved = &st, got
	}
	switch {
	case c.FSDP:
		comm, err := wd.NewComm(dpT, abi.ActChannel)
		if err != nil {
			return nil, fmt.Errorf("train: rank %d: the data-parallel group's collectives: %w", r.world, err)
		}
		r.dpComm = comm
		if err := r.shard(comm, saved); err != nil {
			return nil, err
		}
	case m.DP > 1:
		comm, err := wd.NewComm(dpT, abi.ActChannel)
		if err != nil {
			return nil, fmt.Errorf("train: rank %d: the data-parallel group's collectives: %w", r.world, err)
		}
		r.dpComm = comm
		if r.dpar, err = nn.NewDataParallel(comm, r.params); err != nil {
			return nil, fmt.Errorf("train: rank %d: %w", r.world, err)
		}
	}
	r.reads = sp.ReadsData(r.pp)
	r.data, r.edata = &source{}, &source{}
	var src, esrc pipe.DataSource
	if r.reads {
		r.owned = newOwnedSource(r.data, sp, r.pp, c.CountTokens)
		src, esrc = r.owned, r.edata // the other ranks get none: the runtime must not need it
	}
	tcfg := pipe.Config{
		Rank: r.pp, Spec: sp, Stages: r.stages, Transport: pipeT, Data: src,
		Loss:      c.Loss(1 / float64(sp.Micro*m.DP)),
		AllReduce: r.allReduce, Timeline: c.Timeline,
	}
	r.towerConfig(&tcfg, false)
	if err := r.checkRecomputable(); err != nil {
		return nil, err
	}
	var err error
	r.train, err = pipe.New(tcfg)
	if err != nil {
		return nil, fmt.Errorf("train: rank %d: %w", r.world, err)
	}
	if c.Eval != nil {
		e := c.Eval.Spec
		ecfg := pipe.Config{
			Rank: r.pp, Spec: e, Stages: r.stages, Transport: pipeT, Data: esrc,
			Loss: c.Loss(1 / float64(e.Micro*m.DP)),
		}
		r.towerConfig(&ecfg, true)
		r.eval, err = pipe.New(ecfg)
		if err != nil {
			r.train.Close()
			return nil, fmt.Errorf("train: rank %d: the eval program: %w", r.world, err)
		}
	}
	return r, nil
}

// build builds the rank's stages from the layer factory: stage s holds
// layers Layers[s], as one nn.Sequential; a tie's stages declare their
// tied parameters; the second model copy's stages are built again.
func (r *rank) build() error {
	c, sp := r.cfg, r.cfg.Train.Spec
	tied := map[int]bool{}
	later := map[int]bool{} // a tie's later stage: its copy is not counted in the norm
	for _, t := range sp.Ties {
		tied[t.A], tied[t.B] = true, true
		later[max(t.A, t.B)] = true
	}
	copies := max(sp.Copies, 1)
	held := map[int]int{} // layer → index in r.layers
	var skip []*nn.Param
	for _, s := range sp.StagesOf(r.pp) {
		var layers []nn.Layer
		var tiedParams []*nn.Param
		var stageParams []*nn.Param
		var layerOf []int // the layer of each of stageParams
		for i := c.Layers[s][0]; i < c.Layers[s][1]; i++ {
			l, err := c.Layer(i)
			if err != nil {
				return fmt.Errorf("train: rank %d: layer %d: %w", r.world, i, err)
			}
			if l == nil {
				return fmt.Errorf("train: rank %d: the layer factory returned nil for layer %d", r.world, i)
			}
			ps := l.Params()
			for j, p := range ps {
				p.Name = nncheckpoint.NNName(j, p.Name)
			}
			if k, ok := held[i]; ok {
				r.layers[k].copies = append(r.layers[k].copies, ps)
			} else {
				held[i] = len(r.layers)
				r.layers = append(r.layers, layerParams{layer: i, params: ps})
			}
			if t, ok := l.(tiedLayer); ok && tied[s] {
				tiedParams = append(tiedParams, t.TiedParams()...)
			}
			layers = append(layers, l)
			stageParams = append(stageParams, ps...)
			for range ps {
				layerOf = append(layerOf, i)
			}
		}
		names := make([]string, len(stageParams))
		for j, p := range stageParams {
			names[j] = p.Name
		}
		seq := nn.NewSequential(layers...)
		for j, p := range stageParams {
			p.Name = names[j] // NewSequential prefixed the position in the stage, which depends on the split
		}
		var st nn.ParamStage = seq
		if c.WrapStage != nil {
			var err error
			if st, err = r.wrap(s, seq); err != nil {
				return err
			}
		}
		if _, swaps := st.(pipe.Swapper); swaps && tied[s] {
			return fmt.Errorf("train: rank %d: stage %d is a stage of a tie and WrapStage's wrapper swaps (pipe.Swapper); the loop's tied stage does not pass swap steps through: wrap the tie's stages with a non-swapping stage", r.world, s)
		}
		if tied[s] {
			r.stages[s] = newTiedStage(st, tiedParams) // none declared: the exchange sums nothing
		} else {
			r.stages[s] = st
		}
		r.params = append(r.params, stageParams...)
		r.stageLayers = append(r.stageLayers, stageLayer{stage: s, seq: seq, wrapped: st, layers: layerOf})
		if later[s] {
			skip = append(skip, tiedParams...)
		}
		if copies == 2 && s >= sp.Stages/2 {
			skip = append(skip, stageParams...)
		}
	}
	towerSkip, err := r.buildTower()
	if err != nil {
		return err
	}
	skip = append(skip, towerSkip...)
	r.counted = nn.NormShare{Replica: r.replica, Skip: skip}.Counted(r.params)
	return nil
}

// checkRecomputable refuses a stage that recomputes a selection of its
// layers (Spec.SelectiveRecompute) but is no pipe.Recomputable: the loop
// builds each stage as an nn.Sequential, which is one, so a wrapper
// (Config.WrapStage's) hid its Select, Drop and Rebuild, and the stage
// would recompute whole, not the share the program's verifier and
// simulator counted.
func (r *rank) checkRecomputable() error {
	sp := r.cfg.Train.Spec
	for _, s := range sp.StagesOf(r.pp) {
		if !sp.SelectiveRecompute(s) {
			continue
		}
		if _, ok := r.stages[s].(pipe.Recomputable); !ok {
			inner := any(nil)
			for _, sl := range r.stageLayers {
				if sl.stage == s {
					inner = sl.wrapped
				}
			}
			return fmt.Errorf("train: rank %d: stage %d recomputes a selection of its layers (-recompute selective or model), but its stage (%T, WrapStage's %T) is no pipe.Recomputable, so it would recompute whole: make the WrapStage wrapper forward Select, Drop and Rebuild to the *nn.Sequential it wraps (as nn.Swapping does), or generate the program with -recompute full", r.world, s, r.stages[s], inner)
		}
	}
	return nil
}

// wrap returns stage s, built as seq, wrapped by Config.WrapStage, after
// checking that the wrapper holds seq's parameters in order.
func (r *rank) wrap(s int, seq *nn.Sequential) (nn.ParamStage, error) {
	st, err := r.cfg.WrapStage(r.world, s, seq)
	if err != nil {
		return nil, fmt.Errorf("train: rank %d: WrapStage of stage %d: %w", r.world, s, err)
	}
	if st == nil {
		return nil, fmt.Errorf("train: rank %d: WrapStage returned nil for stage %d", r.world, s)
	}
	want, got := seq.Params(), st.Params()
	if !slices.Equal(want, got) {
		return nil, fmt.Errorf("train: rank %d: WrapStage's stage %d holds %d parameters, not the %d of the stage it wraps in their order; the loop steps and saves those", r.world, s, len(got), len(want))
	}
	return st, nil
}

func (r *rank) close() {
	r.train.Close()
	if r.eval != nil {
		r.eval.Close()
	}
}
