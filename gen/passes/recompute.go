package passes

import (
	"errors"
	"fmt"
	"maps"
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
	Usage:  "recompute policy per stage: none, full (every stage), full:S,S,... (those stages), selective:F (the first share F in (0, 1] of every stage's layers) or selective:S=F,... (those stages and shares, e.g. selective:0=0.5,2=0.25; F may be model: that stage's marked layers) or model (with -model: per stage the layers the model file marks \"recompute\": true, anywhere in the stage, its memory share their act and its cost their R; docs/model.md): each F of such a stage keeps only the stage's input (and, selective, the activations of the layers it does not recompute), and a RECOMPUTE step re-runs the forward (of the share) right before the chunk's first backward (B or I), trading a forward's time (-cost or -model's R, default F; times the share) for the chunk's activations (times the share) between the two; with @idle (full@idle, full:0,1@idle) each RECOMPUTE then moves earlier into its rank's idle time where that shortens the simulated iteration while no rank's simulated peak of live chunks exceeds the largest rank's; no effect with -forward-only or on a program that holds them already",
	Before: "slots",
	Check:  func(v string) error { _, err := ParseRecompute(v); return err },
	Run: func(p ir.Program, v string, opt Options) (ir.Program, error) {
		pol, err := ParseRecompute(v)
		if err != nil {
			return ir.Program{}, err
		}
		if pol, err = pol.Resolve(p, opt.Marked); err != nil {
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

// RecomputePolicy says which stages recompute, and how much of each: none,
// every stage (All), or the stages listed; and whether their RECOMPUTE
// steps move from the latest point into idle time (Idle:
// RecomputeIntoIdle).
type RecomputePolicy struct {
	All    bool
	Stages []int // sorted, without repeats; used when All is false
	Idle   bool
	// Share is, with All, the share of every stage's layers a RECOMPUTE
	// re-runs (selective:F); Shares, without All, each listed stage's
	// (selective:S=F,...). 0 (or a missing entry) is the whole stage.
	Share  float64
	Shares []float64
	// Model is -recompute model: the stages and shares are those of the
	// layers the -model file marks (Options.Marked), which Resolve fills
	// in for a program's stages. FromModel, without All, says per listed
	// stage that it recomputes its marked layers (selective:S=model),
	// which Resolve fills in too.
	Model     bool
	FromModel []bool
	// Costs and Layers are, per listed stage, set by Resolve from the
	// model's marks: the share of the stage's R a RECOMPUTE costs (0: its
	// share's) and the layers it re-runs (nil: the first share of them);
	// ir.Program's RecomputeCost and RecomputeLayers.
	Costs  []float64
	Layers [][]int
}

// Resolve fills in the stages of pol that take the -model file's marks
// (Model, FromModel) from marked (Options.Marked) for p's stages, and
// returns the policy; a policy without them is returned as it is. An
// error says when there is no -model, when no stage has a marked layer
// under Model, and names a stage of FromModel without one. pol is not
// modified.
func (pol RecomputePolicy) Resolve(p ir.Program, marked func(stages, copies int) ([]ir.Mark, error)) (RecomputePolicy, error) {
	if !pol.Model && !slices.Contains(pol.FromModel, true) {
		return pol, nil
	}
	if marked == nil {
		return RecomputePolicy{}, fmt.Errorf(`-recompute %s recomputes the layers a -model file marks "recompute": true; give -model FILE (docs/model.md), or -recompute full or selective:F`, pol.value())
	}
	marks, err := marked(p.Stages(), max(p.Copies, 1))
	if err != nil {
		return RecomputePolicy{}, fmt.Errorf("-recompute %s: %w", pol.value(), err)
	}
	if len(marks) != p.Stages() {
		return RecomputePolicy{}, fmt.Errorf("-recompute %s: the model's marks cover %d stages, the program has %d", pol.value(), len(marks), p.Stages())
	}
	out := RecomputePolicy{Idle: pol.Idle}
	add := func(s int, share float64, mk ir.Mark) {
		out.Stages = append(out.Stages, s)
		out.Shares = append(out.Shares, share)
		out.Costs = append(out.Costs, mk.Cost)
		out.Layers = append(out.Layers, mk.Layers)
	}
	if pol.Model {
		for s, mk := range marks {
			if mk.Share > 0 {
				add(s, mk.Share, mk)
			}
		}
		if len(out.Stages) == 0 {
			return RecomputePolicy{}, errors.New(`-recompute model: no stage holds a layer the -model file marks "recompute": true`)
		}
		return out, nil
	}
	for i, s := range pol.Stages {
		switch {
		case i < len(pol.FromModel) && pol.FromModel[i]:
			if s >= len(marks) || marks[s].Share <= 0 {
				return RecomputePolicy{}, fmt.Errorf(`-recompute %s: stage %d holds no layer the -model file marks "recompute": true; give it a share (%d=F) or mark its layers`, pol.value(), s, s)
			}
			add(s, marks[s].Share, marks[s])
		default:
			add(s, pol.Part(s), ir.Mark{})
		}
	}
	return out, nil
}

// value is the -recompute value of an unresolved model policy, for
// errors.
func (pol RecomputePolicy) value() string {
	if pol.Model {
		return "model"
	}
	var f []string
	for i, s := range pol.Stages {
		v := strconv.FormatFloat(pol.Part(s), 'g', -1, 64)
		if i < len(pol.FromModel) && pol.FromModel[i] {
			v = "model"
		}
		f = append(f, strconv.Itoa(s)+"="+v)
	}
	return "selective:" + strings.Join(f, ",")
}

// index is the position of stage s in pol.Stages, ok false when it is
// not listed.
func (pol RecomputePolicy) index(s int) (int, bool) {
	return slices.BinarySearch(pol.Stages, s)
}

// On reports whether stage s recomputes under the policy.
func (pol RecomputePolicy) On(s int) bool {
	if pol.All {
		return true
	}
	_, found := slices.BinarySearch(pol.Stages, s)
	return found
}

// Part returns the share of stage s's layers a RECOMPUTE of it re-runs
// under the policy: 0 when the stage does not recompute, 1 for full
// recompute, a share in (0, 1) for selective.
func (pol RecomputePolicy) Part(s int) float64 {
	if !pol.On(s) {
		return 0
	}
	f := pol.Share
	if !pol.All {
		i, _ := pol.index(s)
		f = 0
		if i < len(pol.Shares) {
			f = pol.Shares[i]
		}
	}
	if f <= 0 || f >= 1 {
		return 1
	}
	return f
}

// recomputeWant is what every -recompute error ends with.
const recomputeWant = "want none, full (every stage), full:S,S,... (those stages, e.g. full:0,2), selective:F (a share F in (0, 1] of every stage's layers, e.g. selective:0.5) or selective:S=F,... (e.g. selective:0=0.5,2=0.25; F model: the stage's marked layers, e.g. selective:0=1,2=model) or model (the layers a -model file marks \"recompute\": true), then @idle to move each RECOMPUTE into idle time"

// ParseRecompute parses -recompute's value: "none" (or ""), "full" (every
// stage), "full:0,2" (stages 0 and 2), "selective:0.5" (half of every
// stage's layers: the first half, whose activations the F drops and the
// RECOMPUTE rebuilds; the F keeps the rest) or "selective:0=0.5,2=0.25"
// (those stages, those shares; a share of 1 is full; a share "model" is
// the stage's layers a -model file marks, FromModel), "model" (every
// stage's marked layers, Model), any but "none" with "@idle" after it
// (Idle).
func ParseRecompute(v string) (RecomputePolicy, error) {
	if base, ok := strings.CutSuffix(v, "@idle"); ok && base != "" && base != "none" {
		pol, err := ParseRecompute(base)
		pol.Idle = err == nil
		return pol, err
	}
	switch policy, list, hasList := strings.Cut(v, ":"); {
	case v == "" || v == "none":
		return RecomputePolicy{}, nil
	case v == "model":
		return RecomputePolicy{Model: true}, nil
	case policy == "full" && !hasList:
		return RecomputePolicy{All: true}, nil
	case policy == "full":
		var pol RecomputePolicy
		for f := range strings.SplitSeq(list, ",") {
			s, err := parseRecomputeStage(f, v, "full:0,2")
			if err != nil {
				return RecomputePolicy{}, err
			}
			pol.Stages = append(pol.Stages, s)
		}
		slices.Sort(pol.Stages)
		pol.Stages = slices.Compact(pol.Stages)
		return pol, nil
	case policy == "selective" && !hasList:
		return RecomputePolicy{}, fmt.Errorf("recompute policy %q names no share; want selective:F (e.g. selective:0.5) or selective:S=F,... (e.g. selective:0=0.5,2=0.25)", v)
	case policy == "selective" && !strings.Contains(list, "="):
		f, err := parseRecomputeShare(list, v)
		return RecomputePolicy{All: true, Share: f}, err
	case policy == "selective":
		share := map[int]float64{} // -1: the stage's marked layers
		for item := range strings.SplitSeq(list, ",") {
			st, fv, ok := strings.Cut(item, "=")
			if !ok {
				return RecomputePolicy{}, fmt.Errorf("%q in %q is not S=F (a stage and the share of its layers to recompute); want e.g. selective:0=0.5,2=0.25", item, v)
			}
			s, err := parseRecomputeStage(st, v, "selective:0=0.5,2=0.25")
			if err != nil {
				return RecomputePolicy{}, err
			}
			f := -1.0
			if strings.TrimSpace(fv) != "model" {
				if f, err = parseRecomputeShare(fv, v); err != nil {
					return RecomputePolicy{}, err
				}
			}
			if _, dup := share[s]; dup {
				return RecomputePolicy{}, fmt.Errorf("stage %d is given twice in %q; give each stage one share", s, v)
			}
			share[s] = f
		}
		var pol RecomputePolicy
		pol.Stages = slices.Sorted(maps.Keys(share))
		pol.FromModel = make([]bool, len(pol.Stages))
		for i, s := range pol.Stages {
			pol.Shares = append(pol.Shares, max(share[s], 0))
			pol.FromModel[i] = share[s] < 0
		}
		if !slices.Contains(pol.FromModel, true) {
			pol.FromModel = nil
		}
		return pol, nil
	}
	return RecomputePolicy{}, fmt.Errorf("unknown recompute policy %q; %s", v, recomputeWant)
}

// parseRecomputeStage parses one stage of -recompute's value v.
func parseRecomputeStage(f, v, example string) (int, error) {
	s, err := strconv.Atoi(strings.TrimSpace(f))
	if err != nil || s < 0 || s > ir.MaxIndex {
		return 0, fmt.Errorf("stage %q in %q is not a stage number 0..%d; want e.g. %s", f, v, ir.MaxIndex, example)
	}
	return s, nil
}

// parseRecomputeShare parses the share of a selective policy: a number
// in (0, 1].
func parseRecomputeShare(f, v string) (float64, error) {
	x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
	if err != nil || !(x > 0 && x <= 1) {
		return 0, fmt.Errorf("share %q in %q is not a number in (0, 1] (the share of a stage's layers to recompute; 1 is full); want e.g. selective:0.5", f, v)
	}
	return x, nil
}

// Recompute places, for every chunk (stage, micro) of a stage the policy
// names that has a backward, one RECOMPUTE step on the stage's rank: at
// the latest point, right before the step that runs the chunk's first
// backward (B or I, or the overlap holding it), so that the chunk's
// activations are rebuilt only when they are needed. The chunk's F then
// keeps only the stage's input (the runtime drops what the stage saved;
// gen/verify counts the chunk live from its RECOMPUTE, not its F). Under a
// selective policy the program's RecomputeShare holds each such stage's
// share: its F drops that share of the chunk's activations and keeps the
// rest, and its RECOMPUTE re-runs that share of the forward; a policy
// Resolved from a model's marks also sets RecomputeCost (the marked
// layers' share of R, where it differs) and RecomputeLayers (which layers).
// A policy that still takes a model's marks is refused: Resolve it first.
//
// It runs after the transfers, FSDP, ties and OPT_STEP are in place and
// before "slots", which gives each RECOMPUTE its chunk's slot. A
// forward-only program, and a program that already holds RECOMPUTE steps
// (an -in file), are left as they are; a program that swaps a chunk of a
// stage the policy recomputes is refused (swapping and recomputing are two
// ways to free the same activations: a chunk takes one, so -swap and
// -recompute mix over different stages), as is a stage outside the
// program. p is not modified.
func Recompute(p ir.Program, pol RecomputePolicy) (ir.Program, error) {
	if pol.Model || slices.Contains(pol.FromModel, true) {
		return ir.Program{}, errors.New("recompute: the policy takes a -model file's marks; Resolve it for the program first")
	}
	if (!pol.All && len(pol.Stages) == 0) || p.ForwardOnly() {
		return p, nil
	}
	S := p.Stages()
	if n := len(pol.Stages); n > 0 && pol.Stages[n-1] >= S {
		return ir.Program{}, fmt.Errorf("recompute: stage %d is outside the program's stages 0..%d", pol.Stages[n-1], S-1)
	}
	for r, steps := range p.Ranks {
		for i := range steps {
			switch st := &steps[i]; {
			case st.Kind == abi.Recompute:
				return p, nil
			case st.Kind.IsSwap() && pol.On(st.Stage):
				return ir.Program{}, fmt.Errorf("recompute: rank %d step %d is %s: chunk (stage %d, micro %d) is swapped (-swap) and its stage recomputes (-recompute); both free a chunk's activations between its F and its backward, and a chunk takes one: leave stage %d out of -recompute (list the others: full:S,...), or raise -swap above its chunks' distance from F to backward", r, i, *st, st.Stage, st.Micro, st.Stage)
			}
		}
	}
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	q.RecomputeShare, q.RecomputeCost, q.RecomputeLayers = nil, nil, nil
	for s := range S {
		if f := pol.Part(s); f > 0 && f < 1 {
			if q.RecomputeShare == nil {
				q.RecomputeShare = make([]float64, S)
			}
			q.RecomputeShare[s] = f
		}
		i, ok := pol.index(s)
		if pol.All || !ok {
			continue
		}
		if i < len(pol.Costs) && pol.Costs[i] > 0 && pol.Costs[i] != pol.Part(s) {
			if q.RecomputeCost == nil {
				q.RecomputeCost = make([]float64, S)
			}
			q.RecomputeCost[s] = pol.Costs[i]
		}
		if i < len(pol.Layers) && pol.Layers[i] != nil {
			if q.RecomputeLayers == nil {
				q.RecomputeLayers = make([][]int, S)
			}
			q.RecomputeLayers[s] = pol.Layers[i]
		}
	}
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
