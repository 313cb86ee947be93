package passes

import (
	"fmt"
	"strings"

	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
)

// Error reports a step a pass cannot lower.
type Error struct {
	Pass   string // "comm", "slots", ...
	Rank   int    // -1 when the problem is not on one rank
	Index  int    // index of the step in the pass's input program, -1 when none
	Step   ir.Step
	Reason string
}

func (e *Error) Error() string {
	if e.Rank < 0 {
		return e.Pass + ": " + e.Reason
	}
	if e.Index < 0 {
		return fmt.Sprintf("%s: rank %d: %s", e.Pass, e.Rank, e.Reason)
	}
	return fmt.Sprintf("%s: rank %d step %d (%s): %s", e.Pass, e.Rank, e.Index, e.Step, e.Reason)
}

// Blocked is one rank of a cycle of ranks that wait for one another.
type Blocked struct {
	Rank  int
	Index int     // index of the step the rank is blocked at, in the pass's input program
	Step  ir.Step // that step
	On    ir.Step // the peer's step whose output it waits for
	Peer  int     // the rank it waits for
}

// CycleError reports a compute order no placement of transfers can run: the
// ranks of Cycle wait for one another in a ring (the last waits for the first).
type CycleError struct {
	Pass  string
	Cycle []Blocked
	// Chain is true when the waits end at a rank that waits for nothing
	// instead of closing a ring (an inconsistent program).
	Chain bool
}

func (e *CycleError) Error() string {
	var b strings.Builder
	b.WriteString(e.Pass)
	b.WriteString(": compute order is infeasible, ranks wait for one another: ")
	for i, w := range e.Cycle {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "rank %d at step %d (%s) waits for %s on rank %d", w.Rank, w.Index, w.Step, w.On, w.Peer)
	}
	if e.Chain {
		b.WriteString(" (which never runs it)")
	}
	b.WriteString("; reorder the compute steps so every rank's inputs are produced before it needs them")
	return b.String()
}

// checkSteps validates what every pass relies on: the placement matches the
// program, every step's stage and micro-batch are in range, and every step
// runs on the rank holding its stage. With computeOnly, transfer steps are
// rejected (the program must not be lowered yet). The common case is one
// cheap test per step; the error is built only for a failing step.
func checkSteps(p ir.Program, pass string, computeOnly bool) error {
	P, S, M := len(p.Ranks), p.Stages(), p.Micro
	if p.Placement.NumRanks != P {
		return &Error{Pass: pass, Rank: -1, Index: -1, Reason: fmt.Sprintf("placement has %d ranks but the program has %d rank lists", p.Placement.NumRanks, P)}
	}
	if S == 0 {
		return &Error{Pass: pass, Rank: -1, Index: -1, Reason: "placement has no stages"}
	}
	if c := p.Copies; c > 1 && (S%c != 0 || M%c != 0) {
		return &Error{Pass: pass, Rank: -1, Index: -1, Reason: fmt.Sprintf("%d copies do not split %d stages and %d micro-batches evenly", c, S, M)}
	}
	rankOf := p.Placement.RankOf
	for s, r := range rankOf {
		if r < 0 || r >= P {
			return &Error{Pass: pass, Rank: -1, Index: -1, Reason: fmt.Sprintf("placement puts stage %d on rank %d, outside 0..%d", s, r, P-1)}
		}
	}
	bad := uint8(checkInvalid) // the kinds no leaf may have
	if computeOnly {
		bad |= checkComm
	}
	copies := p.Copies > 1
	leafOK := func(r int, st *ir.Step) bool {
		f := checkFlags[st.Kind]
		if f&bad != 0 {
			return false
		}
		if f&checkStage != 0 && (st.Stage < 0 || st.Stage >= S || (rankOf[st.Stage] != r && !p.OwnerStep(r, *st))) {
			return false
		}
		if f&checkMicro != 0 && (st.Micro < 0 || st.Micro >= M) {
			return false
		}
		return !copies || f&(checkStage|checkMicro) != checkStage|checkMicro || p.Runs(st.Stage, st.Micro)
	}
	rankErr := func(r int) error {
		steps := p.Ranks[r]
		for i := range steps {
			st := &steps[i]
			if !st.Kind.IsOverlap() {
				// The common case without a call: with one copy, a leaf of
				// a valid kind, in range and on its stage's rank passes
				// leafOK.
				f := checkFlags[st.Kind]
				if !copies && f&bad == 0 && (f&checkStage == 0 || uint(st.Stage) < uint(S) && rankOf[st.Stage] == r) && (f&checkMicro == 0 || uint(st.Micro) < uint(M)) {
					continue
				}
				if !leafOK(r, st) {
					return stepError(p, pass, computeOnly, r, i, *st, *st)
				}
				continue
			}
			if len(st.Sub) != 2 {
				return &Error{Pass: pass, Rank: r, Index: i, Step: *st, Reason: fmt.Sprintf("an overlap holds exactly two sub-steps, this one %d", len(st.Sub))}
			}
			for k := range st.Sub {
				sub := &st.Sub[k]
				if !sub.Kind.IsCompute() || sub.Kind.IsOverlap() {
					return &Error{Pass: pass, Rank: r, Index: i, Step: *st, Reason: fmt.Sprintf("overlap sub-step %s is not F, B, I or W", sub)}
				}
				if !leafOK(r, sub) {
					return stepError(p, pass, computeOnly, r, i, *st, *sub)
				}
			}
		}
		return nil
	}
	// Ranks are checked in parallel; the first rank's error is reported.
	errs := make([]error, P)
	par.ForRanks(P, p.NumSteps(), func(r int) { errs[r] = rankErr(r) })
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkFlags holds, per kind, what checkSteps asks of a leaf step (not an
// overlap's composite), in one load.
var checkFlags = func() (t [256]uint8) {
	for k := range t {
		kind := ir.Kind(k)
		if !kind.Valid() || kind.IsOverlap() {
			t[k] |= checkInvalid
		}
		if kind.IsComm() {
			t[k] |= checkComm
		}
		if kind.HasStage() {
			t[k] |= checkStage
		}
		if kind.HasMicro() {
			t[k] |= checkMicro
		}
	}
	return t
}()

// The bits of checkFlags.
const (
	checkInvalid = 1 << iota // not a kind, or an overlap: never a leaf
	checkComm                // a transfer: refused in a compute-only program
	checkStage               // HasStage
	checkMicro               // HasMicro
)

// stepError explains why checkSteps rejects step st (top, or a sub-step of it).
func stepError(p ir.Program, pass string, computeOnly bool, r, i int, top, st ir.Step) error {
	S, M := p.Stages(), p.Micro
	e := &Error{Pass: pass, Rank: r, Index: i, Step: top}
	k := st.Kind
	switch {
	case !k.Valid():
		e.Reason = fmt.Sprintf("unknown step kind %d", uint8(k))
	case k.IsOverlap():
		e.Reason = "an overlap cannot hold another overlap"
	case computeOnly && k.IsComm():
		e.Reason = "the program already holds transfer steps; comm insertion takes a compute-only program (see Program.ComputeOnly)"
	case k.HasStage() && (st.Stage < 0 || st.Stage >= S):
		e.Reason = fmt.Sprintf("stage %d is outside 0..%d", st.Stage, S-1)
	case k.HasMicro() && (st.Micro < 0 || st.Micro >= M):
		e.Reason = fmt.Sprintf("micro-batch %d is outside 0..%d", st.Micro, M-1)
	case p.Placement.RankOf[st.Stage] != r:
		e.Reason = fmt.Sprintf("stage %d lives on rank %d (placement %s), not on rank %d", st.Stage, p.Placement.RankOf[st.Stage], p.Placement, r)
	default:
		first, last := p.Route(st.Micro)
		e.Reason = fmt.Sprintf("micro-batch %d runs only stages %d..%d (its model copy), not stage %d", st.Micro, first, last, st.Stage)
	}
	return e
}
