package pipe

import (
	"fmt"
	"math"
	"slices"
	"time"

	"gorgonia.org/tensor"
)

// Recomputable is a Stage that recomputes a share of its layers (selective
// recompute, Spec.RecomputeShare). After the chunk's F, Drop gets the
// input x and the context Forward saved, and returns what the chunk keeps
// until its RECOMPUTE: what the layers outside the share saved, and what
// re-running the share takes (its input). At the RECOMPUTE, Rebuild
// re-runs the share's layers from kept and returns the context Forward
// returned, bit for bit (a deterministic forward), for the chunk's
// backward. runtime/nn's Sequential implements it, recomputing the first
// share of its layers. A stage of Spec.Recompute that does not implement it
// recomputes whole: its F keeps only the input, and RECOMPUTE re-runs
// Forward.
type Recomputable interface {
	Drop(x *tensor.Dense, saved any, share float64) (kept any, err error)
	Rebuild(kept any) (saved any, err error)
}

// Recompute runs RECOMPUTE(stage, micro) in slot (`ppgen gen -recompute`):
// it re-runs the stage's Forward on the input the chunk's F kept and keeps
// what the stage saves, for the chunk's backward; the output is discarded
// (the F sent it on already, and the loss of the last stage was taken
// then). The stage is one of Spec.Recompute, whose F keep only the input:
// so a stage needs no change to recompute, and its activations are held
// only from its RECOMPUTE to its backward. Under a selective policy
// (Spec.RecomputeShare) a Recomputable stage's F kept what Drop returned,
// and RECOMPUTE calls its Rebuild instead. A deterministic Forward rebuilds
// exactly what the F saved, so training with recompute equals training
// without it bit for bit. At is (stage, micro, slot, -1).
//
//go:noinline
func (x *Exec) Recompute(a At) {
	if x.failedNow() {
		return
	}
	const k = OpRecompute
	stage, micro, slot, _ := a.Unpack()
	if !x.valid(stage, micro, slot) {
		x.badArgs(k, stage, micro, slot, -1)
		return
	}
	s := &x.slots[slot]
	kept := s.flags&keptShare != 0
	switch {
	case !x.recomputes(stage):
		x.stepFailf(k, stage, micro, -1, "stage %d does not recompute (it is not in Spec.Recompute %v), so its F kept what the stage saved", stage, x.spec.Recompute)
		return
	case s.key != keyOf(stage, micro) || s.flags&fwdDone == 0:
		x.stepFailf(k, stage, micro, -1, "slot %d does not hold the chunk after its F; RECOMPUTE follows the chunk's F", slot)
		return
	case s.flags&(inDone|wDone) != 0 || (s.saved != nil && !kept):
		x.stepFailf(k, stage, micro, -1, "the chunk's activations are there already (a second RECOMPUTE, or one after its backward)")
		return
	case s.x == nil && !kept:
		x.stepFailf(k, stage, micro, -1, "the chunk kept no input to recompute from")
		return
	}
	var saved any
	var err error
	if ts, ok := x.stages[stage].(*timedStage); ok {
		start := time.Now()
		saved, err = x.rebuild(stage, s, kept)
		ts.record('R', 3, start) // a Timeline's R call (not an F)
	} else {
		saved, err = x.rebuild(stage, s, kept)
	}
	if !x.stepOK(k, stage, micro, err) {
		return
	}
	s.x, s.saved = nil, saved // the stage keeps the input in saved if it needs it
	s.flags &^= keptShare
	x.mem.add(x.dropParts(stage, kept))
}

// rebuild is the stage call of a RECOMPUTE: the stage's Rebuild of what
// its F kept (selective, kept), else its Forward on the input, whose
// output it drops.
func (x *Exec) rebuild(stage int, s *slotState, kept bool) (any, error) {
	if kept {
		return x.raw[stage].(Recomputable).Rebuild(s.saved)
	}
	_, saved, err := x.raw[stage].Forward(s.x)
	return saved, err
}

// recomputes reports whether stage is one of Spec.Recompute.
func (x *Exec) recomputes(stage int) bool {
	_, found := slices.BinarySearch(x.spec.Recompute, stage)
	return found
}

// dropAtF is the F of a chunk of a recomputing stage: it keeps what the
// chunk's RECOMPUTE needs, in place of the context saved the stage
// returned: what Recomputable.Drop keeps, under a selective share of a
// stage that implements it, else the input in. It reports whether it
// succeeded (a failed Drop fails the rank).
func (x *Exec) dropAtF(s *slotState, stage, micro int, in *tensor.Dense, saved any) bool {
	if f := x.share(stage); f < 1 {
		if rs, ok := x.raw[stage].(Recomputable); ok {
			kept, err := rs.Drop(in, saved, f)
			if err != nil || kept == nil {
				if err == nil {
					err = fmt.Errorf("Drop kept nothing")
				}
				x.stepFail(OpForward, stage, micro, -1, fmt.Errorf("selective recompute: %w", err))
				return false
			}
			s.saved = kept
			s.flags |= keptShare
			x.mem.add(-x.dropParts(stage, true))
			return true
		}
	}
	s.x, s.saved = in, nil // Recompute rebuilds saved from the input
	x.mem.add(-x.dropParts(stage, false))
	return true
}

// share is the share of stage a RECOMPUTE of it re-runs under
// Spec.RecomputeShare: 1 (the whole stage) when none is given.
func (x *Exec) share(stage int) float64 {
	if stage < len(x.spec.RecomputeShare) {
		if f := x.spec.RecomputeShare[stage]; f > 0 && f < 1 {
			return f
		}
	}
	return 1
}

// dropParts is how much of a chunk of stage (in memCount's parts) its F
// drops and its RECOMPUTE rebuilds: the stage's share when it keeps the
// rest (selective), else the whole chunk.
func (x *Exec) dropParts(stage int, selective bool) int64 {
	if !selective {
		return chunkParts
	}
	return int64(math.Round(x.share(stage) * chunkParts))
}

// chunkParts is memCount's unit: one chunk's saved context is chunkParts
// parts, so that a chunk that keeps a share of it counts that share (as
// gen/verify counts it).
const chunkParts = 1_000_000

// memCount counts the saved contexts a rank holds: from a chunk's F
// (whose stage saved a context) to its last backward, less the share its F
// drops until its RECOMPUTE rebuilds it; peak is the most at once.
type memCount struct{ live, peak int64 }

func (m *memCount) add(d int64) {
	m.live += d
	m.peak = max(m.peak, m.live)
}

// PeakLive returns the most chunks whose saved context the rank held at
// once since New, measured as the steps ran: a chunk counts from its F
// (when its stage saved a context) to its last backward (B or W), and a
// chunk of a recomputing stage not from its F to its RECOMPUTE, or, when
// its stage kept a share 1 − f of the context (Recomputable, selective
// recompute), only that share. gen/verify's Report.PeakLive is what it
// proves of the same program: the two are equal where the stages save a
// context for every chunk and nothing is swapped out (a swapped-out chunk
// counts as held here). Call it between iterations.
func (x *Exec) PeakLive() float64 { return float64(x.mem.peak) / chunkParts }
