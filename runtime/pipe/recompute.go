package pipe

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"gorgonia.org/tensor"
)

// Recomputable is a Stage that recomputes some of its layers (selective
// recompute: Spec.RecomputeShare, Spec.RecomputeLayers). New calls Select
// once, before any Forward, with the stage's share and its layers (the
// indices within the stage that Spec.RecomputeLayers lists; nil: the
// first share of the stage's layers), so that the stage's Forward keeps
// what Drop will need. After the chunk's F, Drop gets the input x and the
// context Forward saved, and returns what the chunk keeps until its
// RECOMPUTE: what the layers outside the selection saved, and what
// re-running the selected layers takes (the input of each run of them).
// At the RECOMPUTE, Rebuild re-runs the selected layers from kept and
// returns the context Forward returned, bit for bit (a deterministic
// forward), for the chunk's backward. runtime/nn's Sequential implements
// it. A stage of Spec.Recompute that does not implement it recomputes
// whole: its F keeps only the input, and RECOMPUTE re-runs Forward. A
// wrapper passes it on only when the stage it wraps has it (nn.Swapping,
// nn.FSDP.AsStage, runtime/train's tied stages), so that it does not make
// a stage that cannot keep a share claim it.
type Recomputable interface {
	Select(share float64, layers []int) error
	Drop(x *tensor.Dense, saved any) (kept any, err error)
	Rebuild(kept any) (saved any, err error)
}

// selectLayers calls Select on each Recomputable stage of rank r that
// recomputes selectively under sp (selective), with its share and
// layers.
func selectLayers(sp Spec, r int, stages []Stage) error {
	for _, s := range sp.Recompute {
		if s < 0 || s >= len(stages) || stages[s] == nil || !selective(sp, s) {
			continue
		}
		rs, ok := stages[s].(Recomputable)
		if !ok {
			continue
		}
		var layers []int
		if s < len(sp.RecomputeLayers) {
			layers = sp.RecomputeLayers[s]
		}
		if err := rs.Select(shareOf(sp, s), layers); err != nil {
			return fmt.Errorf("pipe: rank %d: stage %d (a %T) refuses its selective recompute (RecomputeShare %v, RecomputeLayers %v): %w", r, s, stages[s], shareOf(sp, s), layers, err)
		}
	}
	return nil
}

// selective reports whether stage s of sp recomputes a selection of its
// layers, not the whole stage: it has a share under 1 or a list of
// layers.
func selective(sp Spec, s int) bool {
	return shareOf(sp, s) < 1 || (s < len(sp.RecomputeLayers) && len(sp.RecomputeLayers[s]) > 0)
}

// SelectiveRecompute reports whether stage recomputes a selection of its
// layers under s (one of Recompute with a RecomputeShare under 1 or a
// list of RecomputeLayers): a stage that implements Recomputable then
// keeps the rest of its context after its F; one that does not recomputes
// whole. A loop that builds Recomputable stages (runtime/train) refuses a
// wrapper that hides it.
func (s Spec) SelectiveRecompute(stage int) bool {
	_, in := slices.BinarySearch(s.Recompute, stage)
	return in && selective(s, stage)
}

// shareOf is the share of stage s's activations a RECOMPUTE of it drops
// and rebuilds under sp.RecomputeShare: 1 (the whole stage) when none is
// given.
func shareOf(sp Spec, s int) float64 {
	if s < len(sp.RecomputeShare) {
		if f := sp.RecomputeShare[s]; f > 0 && f < 1 {
			return f
		}
	}
	return 1
}

// checkRecomputeLayers checks Spec.RecomputeLayers: one entry per stage
// (or nil), each increasing and non-negative, and only for stages of
// Recompute.
func checkRecomputeLayers(s *Spec) error {
	if s.RecomputeLayers == nil {
		return nil
	}
	if len(s.RecomputeLayers) != s.Stages {
		return fmt.Errorf("len(RecomputeLayers) = %d, want Stages = %d (or nil)", len(s.RecomputeLayers), s.Stages)
	}
	for st, ls := range s.RecomputeLayers {
		if len(ls) == 0 {
			continue
		}
		if _, ok := slices.BinarySearch(s.Recompute, st); !ok {
			return fmt.Errorf("RecomputeLayers[%d] = %v, but stage %d is not in Recompute %v; list the layers of recomputing stages only", st, ls, st, s.Recompute)
		}
		for i, l := range ls {
			if l < 0 || (i > 0 && l <= ls[i-1]) {
				return fmt.Errorf("RecomputeLayers[%d] = %v: want increasing layer indices within the stage, from 0", st, ls)
			}
		}
	}
	return nil
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
		x.tl.noteRecompute(stage, x.rebuiltShare(stage, kept))
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

// rebuiltShare is the share of stage's R a RECOMPUTE re-ran (a
// Timeline's record of it, for gen/tune): 1 when it re-ran Forward; when
// it rebuilt what Recomputable's Drop kept (kept), the stage's
// Spec.RecomputeCost entry where the Spec has one, else -1 when its share
// is of the layers Spec.RecomputeLayers names (the Spec then holds their
// memory share, not their R's), else its RecomputeShare.
func (x *Exec) rebuiltShare(stage int, kept bool) float64 {
	switch {
	case !kept:
		return 1
	case stage < len(x.spec.RecomputeCost):
		return x.spec.RecomputeCost[stage]
	case stage < len(x.spec.RecomputeLayers) && len(x.spec.RecomputeLayers[stage]) > 0:
		return -1
	}
	return x.share(stage)
}

// recomputes reports whether stage is one of Spec.Recompute.
func (x *Exec) recomputes(stage int) bool {
	_, found := slices.BinarySearch(x.spec.Recompute, stage)
	return found
}

// dropAtF is the F of a chunk of a recomputing stage: it keeps what the
// chunk's RECOMPUTE needs, in place of the context saved the stage
// returned: what Recomputable.Drop keeps, for a stage that recomputes
// selectively (a share or a list of layers) and implements it, else the
// input in. It reports whether it
// succeeded (a failed Drop fails the rank).
func (x *Exec) dropAtF(s *slotState, stage, micro int, in *tensor.Dense, saved any) bool {
	if selective(x.spec, stage) {
		if rs, ok := x.raw[stage].(Recomputable); ok {
			kept, err := rs.Drop(in, saved)
			if err != nil || kept == nil {
				if err == nil {
					err = fmt.Errorf("Drop kept nothing")
				}
				x.stepFail(OpForward, stage, micro, -1, fmt.Errorf("selective recompute: %w", err))
				return false
			}
			s.saved = kept
			s.flags |= keptShare
			x.mem.drop(x.dropParts(stage, true))
			return true
		}
	}
	s.x, s.saved = in, nil // Recompute rebuilds saved from the input
	x.mem.drop(x.dropParts(stage, false))
	return true
}

// share is the share of stage's activations a RECOMPUTE of it rebuilds
// (shareOf).
func (x *Exec) share(stage int) float64 { return shareOf(x.spec, stage) }

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
//
// Inside an overlap step (between begin and end) the two halves may run
// on two goroutines. Only the F half adds (its context), and both may let
// go of some (the backward's context, the F's drop): drop then holds what
// they let go of, atomically, until end, so that the step counts what its
// F saves before what it releases, in whichever order the halves ran: the
// order gen/verify's PeakLive counts, the same peak on every run, and no
// field written by both halves. Outside overlaps one goroutine runs the
// steps, and add and drop stay two plain updates (they inline into F and
// B).
type memCount struct {
	live, peak int64
	inOverlap  bool  // set and cleared by the rank's goroutine, around the halves
	held       int64 // what the halves let go of, until end (atomic while inOverlap)
}

// add counts d more parts held (d ≥ 0: a context saved or rebuilt).
func (m *memCount) add(d int64) {
	m.live += d
	m.peak = max(m.peak, m.live)
}

// drop counts d parts let go of (d ≥ 0).
func (m *memCount) drop(d int64) {
	if m.inOverlap {
		atomic.AddInt64(&m.held, d)
		return
	}
	m.live -= d
}

// begin starts an overlap step's count (before its halves start).
func (m *memCount) begin() { m.inOverlap = true }

// end ends it (after both halves returned): what they let go of counts now.
func (m *memCount) end() {
	m.inOverlap = false
	m.live -= m.held
	m.held = 0
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
