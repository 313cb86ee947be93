package passes

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// recomputeOption is -recompute: which stages drop their saved activations
// at F and rebuild them with a RECOMPUTE step before the backward.
var recomputeOption = Option{
	Name:   "recompute",
	Usage:  "recompute policy per stage: none, full (every stage), or full:S,S,... (those stages): each F of such a stage keeps only the stage's input, and a RECOMPUTE step re-runs the forward right before the chunk's first backward (B or I), trading a forward's time (-cost or -model's R, default F) for the chunk's activations between the two; with @idle (full@idle, full:0,1@idle) each RECOMPUTE then moves earlier into its rank's idle time where that shortens the simulated iteration while no rank's simulated peak of live chunks exceeds the largest rank's; no effect with -forward-only or on a program that holds them already",
	Before: "slots",
	Check:  func(v string) error { _, err := ParseRecompute(v); return err },
	Run: func(p ir.Program, v string, opt Options) (ir.Program, error) {
		pol, err := ParseRecompute(v)
		if err != nil {
			return ir.Program{}, err
		}
		q, err := Recompute(p, pol)
		if err != nil || !pol.Idle {
			return q, err
		}
		return RecomputeIntoIdle(q, opt.Comm.cost(), 0), nil
	},
}

func init() { declare(&recomputeOption) }

// RecomputePolicy says which stages recompute: none, every stage (All), or
// the stages listed; and whether their RECOMPUTE steps move from the
// latest point into idle time (Idle: RecomputeIntoIdle).
type RecomputePolicy struct {
	All    bool
	Stages []int // sorted, without repeats; used when All is false
	Idle   bool
}

// On reports whether stage s recomputes under the policy.
func (pol RecomputePolicy) On(s int) bool {
	if pol.All {
		return true
	}
	_, found := slices.BinarySearch(pol.Stages, s)
	return found
}

// ParseRecompute parses -recompute's value: "none" (or ""), "full" (every
// stage), or "full:0,2" (stages 0 and 2), either of the last two with
// "@idle" after it (Idle). Selective recompute (a part of each stage's
// layers) is not implemented yet.
func ParseRecompute(v string) (RecomputePolicy, error) {
	if base, ok := strings.CutSuffix(v, "@idle"); ok && base != "" && base != "none" {
		pol, err := ParseRecompute(base)
		pol.Idle = err == nil
		return pol, err
	}
	switch policy, list, hasList := strings.Cut(v, ":"); {
	case v == "" || v == "none":
		return RecomputePolicy{}, nil
	case policy == "full" && !hasList:
		return RecomputePolicy{All: true}, nil
	case policy == "full":
		var pol RecomputePolicy
		for f := range strings.SplitSeq(list, ",") {
			s, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || s < 0 || s > ir.MaxIndex {
				return RecomputePolicy{}, fmt.Errorf("stage %q in %q is not a stage number 0..%d; want e.g. full:0,2", f, v, ir.MaxIndex)
			}
			pol.Stages = append(pol.Stages, s)
		}
		slices.Sort(pol.Stages)
		pol.Stages = slices.Compact(pol.Stages)
		return pol, nil
	case policy == "selective":
		return RecomputePolicy{}, errors.New("selective recompute (a part of each stage's layers) is not implemented yet; want none, full or full:S,S,...")
	}
	return RecomputePolicy{}, fmt.Errorf("unknown recompute policy %q; want none, full (every stage) or full:S,S,... (those stages, e.g. full:0,2), then @idle to move each RECOMPUTE into idle time", v)
}

// Recompute places, for every chunk (stage, micro) of a stage the policy
// names that has a backward, one RECOMPUTE step on the stage's rank: at
// the latest point, right before the step that runs the chunk's first
// backward (B or I, or the overlap holding it), so that the chunk's
// activations are rebuilt only when they are needed. The chunk's F then
// keeps only the stage's input (the runtime drops what the stage saved;
// gen/verify counts the chunk live from its RECOMPUTE, not its F).
//
// It runs after the transfers, FSDP, ties and OPT_STEP are in place and
// before "slots", which gives each RECOMPUTE its chunk's slot. A
// forward-only program, and a program that already holds RECOMPUTE steps
// (an -in file), are left as they are; a program with swap steps is
// refused (swapping and recomputing are two ways to free the same
// activations), as is a stage outside the program. p is not modified.
func Recompute(p ir.Program, pol RecomputePolicy) (ir.Program, error) {
	if (!pol.All && len(pol.Stages) == 0) || p.ForwardOnly() {
		return p, nil
	}
	S := p.Stages()
	if n := len(pol.Stages); n > 0 && pol.Stages[n-1] >= S {
		return ir.Program{}, fmt.Errorf("recompute: stage %d is outside the program's stages 0..%d", pol.Stages[n-1], S-1)
	}
	for r, steps := range p.Ranks {
		for i := range steps {
			switch k := steps[i].Kind; {
			case k == abi.Recompute:
				return p, nil
			case k.IsSwap():
				return ir.Program{}, fmt.Errorf("recompute: rank %d step %d is %s: -swap and -recompute both free a chunk's activations between its F and its backward; choose one", r, i, steps[i])
			}
		}
	}
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	M := p.Micro
	seen := make([]bool, S*M) // the chunk's first backward was met
	for r, steps := range p.Ranks {
		out := make([]ir.Step, 0, len(steps)+len(steps)/4)
		for i := range steps {
			st := &steps[i]
			subs := []ir.Step{*st}
			if st.Kind.IsOverlap() {
				subs = st.Sub
			}
			for _, sub := range subs {
				if !sub.Kind.IsBackward() || !pol.On(sub.Stage) || sub.Stage < 0 || sub.Stage >= S || sub.Micro < 0 || sub.Micro >= M {
					continue
				}
				if ch := sub.Stage*M + sub.Micro; !seen[ch] {
					seen[ch] = true
					out = append(out, ir.Step{Kind: abi.Recompute, Stage: sub.Stage, Micro: sub.Micro, Peer: ir.None, Slot: ir.None})
				}
			}
			out = append(out, *st)
		}
		q.Ranks[r] = out
	}
	return q, nil
}

// RecomputeIntoIdle moves the RECOMPUTE steps of p earlier into their
// rank's idle time (Mario's placement: a recomputation that fills a bubble
// costs nothing). Rank by rank, each RECOMPUTE in turn tries every
// position between its chunk's F and where it is, and moves to the one
// where the simulated iteration (gen/sim under c) is shortest, when that is
// shorter than where it is and no rank's simulated peak of live chunks
// exceeds the largest peak of any rank before the moves (an earlier
// RECOMPUTE holds its chunk longer; every rank is provisioned for the
// largest, so memory up to it is free). It spends at most
// budget simulations (0: a default that keeps the work near 2·10⁶ simulated
// steps, between 16 and 2000); p's own step lists are not modified.
func RecomputeIntoIdle(p ir.Program, c sim.Cost, budget int) ir.Program {
	if budget <= 0 {
		budget = min(max(2_000_000/max(p.NumSteps(), 1), 16), 2000)
	}
	res, err := sim.Run(p, c)
	if err != nil {
		return p
	}
	best, cap := res.Makespan, slices.Max(res.PeakActivations)
	q := p
	q.Ranks = slices.Clone(p.Ranks)
	sims := 0
	for r := range q.Ranks {
		for i := 0; i < len(q.Ranks[r]); i++ {
			st := q.Ranks[r][i]
			if st.Kind != abi.Recompute {
				continue
			}
			f := i - 1
			for f >= 0 && !producesForward(q.Ranks[r][f], st.Stage, st.Micro) {
				f--
			}
			steps, to := q.Ranks[r], i
			ok := placeable(steps, f, i, st.Stage)
			for j := i - 1; j > f && sims < budget; j-- {
				if !ok[j-f-1] {
					continue
				}
				q.Ranks[r] = moveTo(steps, i, j)
				sims++
				res, err := sim.Run(q, c)
				if err == nil && res.Makespan < best && !exceeds(res.PeakActivations, cap) {
					best, to = res.Makespan, j
				}
			}
			q.Ranks[r] = steps
			if to != i {
				q.Ranks[r] = moveTo(steps, i, to)
			}
		}
	}
	return q
}

// placeable reports, for each index j in f+1..i-1, whether a RECOMPUTE of
// stage moved from i to right before steps[j] would be outside every batch
// (BATCH_BEGIN .. BATCH_END holds only transfers) and, when the rank
// UNSHARDs or RESHARDs the stage (FSDP), where the stage is unsharded (it
// runs the stage's forward).
func placeable(steps []ir.Step, f, i, stage int) []bool {
	managed := false
	for _, st := range steps {
		if (st.Kind == ir.Unshard || st.Kind == ir.Reshard) && st.Stage == stage {
			managed = true
			break
		}
	}
	ok := make([]bool, max(i-f-1, 0))
	inBatch, unsharded := false, false
	for j := 0; j < i; j++ {
		if j > f {
			ok[j-f-1] = !inBatch && (!managed || unsharded)
		}
		switch st := steps[j]; {
		case st.Kind == ir.BatchBegin:
			inBatch = true
		case st.Kind == ir.BatchEnd:
			inBatch = false
		case st.Kind == ir.Unshard && st.Stage == stage:
			unsharded = true
		case st.Kind == ir.Reshard && st.Stage == stage:
			unsharded = false
		}
	}
	return ok
}

// producesForward reports whether st is F(stage, micro) or an overlap
// holding it.
func producesForward(st ir.Step, stage, micro int) bool {
	for _, cs := range st.Computes() {
		if cs.Kind == ir.Forward && cs.Stage == stage && cs.Micro == micro {
			return true
		}
	}
	return false
}

// moveTo returns a copy of steps with the step at i moved to index j < i.
func moveTo(steps []ir.Step, i, j int) []ir.Step {
	out := make([]ir.Step, 0, len(steps))
	out = append(out, steps[:j]...)
	out = append(out, steps[i])
	out = append(out, steps[j:i]...)
	return append(out, steps[i+1:]...)
}

func exceeds(peaks []int, cap int) bool {
	return slices.Max(peaks) > cap
}
