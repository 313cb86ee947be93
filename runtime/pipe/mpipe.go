package pipe

import (
	"fmt"

	"gorgonia.org/tensor"
)

// mpipe's owned-micro data loading (Spec.Owned > 0): micro m < Owned is owned
// by rank m mod Ranks. An owner that does not hold the first stage runs
//
//	x.DataLoad(At(0, m, none, none)) // DATA_LOAD: DataSource.Input(m), held by the Exec
//	x.MpipeSend(At(0, m, peer, none)) // MPIPE_FWD_SEND: ship it to stage 0's rank
//
// and the first stage's rank posts x.MpipeRecv(At(0, m, owner, slot))
// (MPIPE_FWD_RECV) into the chunk's slot; F(0, m) waits for it and takes it
// as its input, as it would a loaded one. Owner steps are rare (at most one
// per rank and iteration), so they take the checked path only (transfer.go).

// owner returns the owner rank of micro m, or -1 when m is not owned.
func (x *Exec) owner(m int) int {
	if m < 0 || m >= x.spec.Owned {
		return -1
	}
	return m % x.spec.Ranks
}

// ownerLoad runs DATA_LOAD(stage, micro) of an owned micro on its owner,
// which does not hold stage: the input waits in the Exec for MpipeSend.
// It reports false when the step is not an owner load (the caller reports).
func (x *Exec) ownerLoad(stage, micro, slot int) bool {
	if slot != -1 || uint(stage) >= uint(len(x.stages)) || x.stages[stage] != nil || !x.routeFirst(stage) || x.owner(micro) != x.rank {
		return false
	}
	if x.ownIn != nil {
		x.stepFailf(OpDataLoad, stage, micro, -1, "the input of micro %d is loaded and not yet sent (MPIPE_FWD_SEND of it must come first)", x.ownMicro)
		return true
	}
	if x.data == nil {
		x.stepFailf(OpDataLoad, stage, micro, -1, "rank %d owns micro %d (mpipe) but Config.Data is nil: an owner loads the input of the micro-batches it owns", x.rank, micro)
		return true
	}
	in, err := x.data.Input(micro)
	if err != nil || in == nil {
		x.dataFail(stage, micro, err, "input")
		return true
	}
	x.ownIn, x.ownMicro = in, micro
	return true
}

// sendOwned runs the checks of MpipeSend (MPIPE_FWD_SEND) and posts the
// send of the owner's loaded input.
func (x *Exec) sendOwned(stage, micro, peer, slot int) {
	const k = OpMpipeSend
	switch {
	case slot != -1:
		x.stepFailf(k, stage, micro, peer, "slot %d: an owner's send of another rank's input has no slot (0xffff)", slot)
	case uint(stage) >= uint(len(x.stages)) || !x.routeFirst(stage):
		x.stepFailf(k, stage, micro, peer, "stage %d does not begin the micro-batches' route: only the first stage takes an owner's input", stage)
	case x.owner(micro) != x.rank:
		x.stepFailf(k, stage, micro, peer, "rank %d does not own micro %d (Spec.Owned = %d: micro m < Owned is owned by rank m mod %d)", x.rank, micro, x.spec.Owned, x.spec.Ranks)
	case x.tr == nil:
		x.stepFailf(k, stage, micro, peer, "no transport")
	case peer != x.spec.RankOf[stage] || peer == x.rank:
		x.stepFailf(k, stage, micro, peer, "peer rank %d, but stage %d is on rank %d", peer, stage, x.spec.RankOf[stage])
	case x.ownIn == nil || x.ownMicro != micro:
		x.stepFailf(k, stage, micro, peer, "the input of micro %d is not loaded: %s must come first on this rank", micro, stepName(OpDataLoad, stage, micro))
	default:
		t := x.ownIn
		x.ownIn = nil
		x.post(commOp{x: &sendInput, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: -1, t: t})
	}
}

// checkOwner checks the peer of MpipeRecv (MPIPE_FWD_RECV): stage is the
// first, micro owned by peer, another rank.
func (x *Exec) checkOwner(stage, micro, peer int) bool {
	const k = OpMpipeRecv
	switch o := x.owner(micro); {
	case !x.routeFirst(stage):
		x.stepFailf(k, stage, micro, peer, "stage %d does not begin the micro-batches' route: only the first stage takes an owner's input", stage)
	case o < 0:
		x.stepFailf(k, stage, micro, peer, "micro %d is not owned (Spec.Owned = %d): the first stage's rank loads it", micro, x.spec.Owned)
	case o == x.rank:
		x.stepFailf(k, stage, micro, peer, "this rank owns micro %d: it loads it with DATA_LOAD", micro)
	case peer != o:
		x.stepFailf(k, stage, micro, peer, "peer rank %d, but micro %d is owned by rank %d", peer, micro, o)
	case x.tr == nil:
		x.stepFailf(k, stage, micro, peer, "no transport")
	default:
		return true
	}
	return false
}

// takeInput returns the input of the first-stage chunk (micro) in s for
// its F: the loaded one, or a received one (waiting for a pending receive),
// passed through the tower under Config.TowerAtFirst. It returns nil when
// there is neither, or the tower failed (reported); the caller reports the
// former.
func (x *Exec) takeInput(s *slotState, micro int) *tensor.Dense {
	if s.x != nil {
		return s.x
	}
	if !x.await(s, actPending) {
		return nil
	}
	in := s.ract
	s.ract = nil
	if in != nil && x.towerAtFirst {
		out, err := x.tower.Forward(micro, in)
		if err != nil || out == nil {
			x.stepFail(OpForward, 0, micro, -1, fmt.Errorf("the tower's forward of a received input (Config.TowerAtFirst): %v", err))
			return nil
		}
		return out
	}
	return in
}

// Preprocess is a frozen preprocess (the first layers of a model kept out
// of the stages, or a vision tower; docs/mpipe.md): a function of one
// micro-batch's input that runs where the input is loaded. Under mpipe that
// is the micro-batch's owner, which ships the preprocess's output to the
// first stage's rank (MPIPE_FWD_SEND); the first stage's rank runs it only
// for the micro-batches it loads itself.
type Preprocess func(micro int, in *tensor.Dense) (*tensor.Dense, error)

// WithPreprocess returns a DataSource whose Input(m) is pre(m, ds.Input(m))
// and whose Target is ds's: the preprocess runs in every input load.
func WithPreprocess(ds DataSource, pre Preprocess) DataSource {
	return preprocessed{ds, pre}
}

type preprocessed struct {
	DataSource
	pre Preprocess
}

func (p preprocessed) Input(micro int) (*tensor.Dense, error) {
	in, err := p.DataSource.Input(micro)
	if err != nil {
		return nil, err
	}
	out, err := p.pre(micro, in)
	if err != nil {
		return nil, fmt.Errorf("the preprocess of micro-batch %d: %w", micro, err)
	}
	return out, nil
}

// Inputs returns the micro-batches whose input rank r loads in an
// iteration, in increasing order: under mpipe (Owned > 0) the ones it owns
// (micro m < Owned on rank m mod Ranks) and, on the first stage's rank,
// the ones nobody owns; otherwise every micro-batch on the rank that holds
// the first stage of its route, and none elsewhere. A sampler gives rank r
// only these micro-batches' inputs (its Config.Data's Input is called for
// no other).
func (s Spec) Inputs(r int) []int {
	var out []int
	for m := range s.Micro {
		first := 0
		if s.Copies > 1 && s.Micro%s.Copies == 0 {
			first = m / (s.Micro / s.Copies) * (s.Stages / s.Copies)
		}
		loader := s.RankOf[first]
		if m < s.Owned {
			loader = m % s.Ranks
		}
		if loader == r {
			out = append(out, m)
		}
	}
	return out
}
