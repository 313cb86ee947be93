// Package tune fits a model description (gen/model, docs/model.md) to a
// measured timeline: the Chrome trace runtime/pipe.Timeline writes (the
// -trace of examples/mlp), one complete event per stage call with the
// call's stage and kind (F, I or W) in its args. `ppgen tune` runs it.
//
// The fit is one layer per stage, named stage0, stage1, ...: a stage's F,
// I and W (and R, where the trace has RECOMPUTE calls) are the medians of
// its calls' durations of that kind (robust to
// the odd call a busy machine or the first touch of a buffer slows down),
// in milliseconds, the unit `ppgen trace` draws one cost unit as, so that
// the simulated trace of the fitted model lines up with the measured one.
// A full backward (a B step) runs as its I and W halves, and the timeline
// records both; a simulated trace of a schedule without split backwards
// (`ppgen trace -schedule 1f1b`) has B calls instead, and a stage with B
// calls and no I or W is fitted its B (written as the layer's "B", which
// gen/model splits evenly into I and W; trace a split schedule to fit the
// halves).
//
// A RECOMPUTE (-recompute) is an R call of the measured timeline (args.kind
// "R") or a host event of a simulated trace (args.kind "RECOMPUTE"); a
// stage with such calls is fitted R, the whole stage's recompute cost
// (gen/model's R, of which the simulator charges a RECOMPUTE the
// program's share): the median of its calls each divided by the share of
// the stage's R one RECOMPUTE of it costs (ir.Program.RecomputeCostPart:
// 1 under full recompute, F under selective:F, the marked layers' R over
// the stage's under -recompute model). The shares are Options.RecomputeCost
// where given, else the trace's (otherData.recompute_cost, which
// `ppgen trace` writes for a selective program, and pipe.Timeline writes
// from its Spec.RecomputeCost, which gen/emit writes for a program with a
// selective or model policy; a hand-written Spec with RecomputeLayers and
// no RecomputeCost leaves its marked stages out, whose R share the
// Timeline then does not know: otherData.recompute_cost_unknown; an R
// call of such a stage without Options.RecomputeCost is refused), else 1.
//
// An overlap step of a simulated trace (OVERLAP_F_B: one micro-batch's
// forward beside another's backward, dualpipe's) is one event for both,
// whose halves' times cannot be told apart: it is skipped and counted.
//
// The model copies the stages form (dualpipe's two, -copies) are read
// from the calls' micro-batches (args.micro) when every call names one:
// two copies when the stages split into halves and each micro-batch runs
// in one half only, else one. Options.Copies, when given, must agree.
//
// Transfers (comm events, which the timeline records for the transfers
// outside batches) give comm and bw: each send's time (the transport's Send
// call; a receive's includes waiting for its peer) is fitted as comm +
// size/bw by least squares over the median send of each size, sizes in
// KiB; one size alone (or times that do not grow with size) gives comm,
// the median send, and no bw (infinite). Sends without a size (no
// args.bytes: the simulated trace `ppgen trace` writes, whose comm events
// have args.kind SEND_F or SEND_B) give comm alone, the median send, when
// the trace has no sized sends: no bw can be fitted to them. A stage's act is the median size
// of its activation sends (SEND_F) in KiB, 1 where it sends none (the
// last, or one whose successor is on its rank); params are 1, as the
// timeline measures time, not parameters.
//
// A trainer's host work around the program (runtime/train records it as
// Timeline spans: category host, args.kind OPT_STEP, ALL_REDUCE, loss)
// gives opt and allreduce, the simulator's costs of OPT_STEP and of an
// ALL_REDUCE beyond comm (host.go): opt the largest of the ranks' median
// OPT_STEP spans, allreduce the median reduction, each reduction (the
// n-th ALL_REDUCE or loss span of every rank) taking its shortest span,
// less comm. Fit.Cost is the whole fit as a sim.Cost; Options.Mean fits
// the calls' means instead of their medians (a realisation report's
// costs: what the calls took together), Options.Each keeps each call's
// own duration for the simulator to replay (sim.Cost.Each), and
// Options.Cores divides each call by the sharing of the cores it ran
// with, for sim.RunShared.
//
// The input is untrusted: at most MaxBytes and MaxEvents events, every
// number range-checked before it is used, stages and ranks within
// gen/ir's limits.
package tune

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/internal/chrometrace"
)

// Limits of a trace.
const (
	MaxBytes  = 128 << 20 // the file (a stage call is some 150 bytes)
	MaxEvents = 1 << 20   // its events, metadata included
	// MaxDur is the longest call, in µs (about 11.6 days): a longer one is
	// not a stage call of a training step.
	MaxDur = 1e12
)

// Options are the checks a caller adds.
type Options struct {
	// Stages, when not 0, is the number of stages the trace must have
	// (-stages): a trace of another schedule or model is refused.
	Stages int
	// Copies is the number of model copies the trace's S stages form
	// (-copies; dualpipe's 2): stage s runs the layers of stage s mod
	// S/Copies, whose calls are fitted together. 0 reads it from the
	// trace's micro-batches (one copy when they are not given); a value
	// the micro-batches contradict is refused.
	Copies int
	// Mean fits each stage's F, I, W (or B), and R, to the mean of its calls
	// rather than the median: what the calls took together, slow ones
	// included, as a realisation report compares with the measured step
	// (examples/charlm -realise); the median is the cost of a typical call.
	Mean bool
	// Each keeps every call's own duration in Fit.Each, by kind, stage
	// and micro-batch (the mean of the calls of one key: a trace of several
	// iterations), for the simulator to replay them (sim.Cost.Each). Calls
	// that name no micro-batch are left out of it.
	Each bool
	// Cores, when not 0, is the number of cores the trace's ranks shared
	// (every rank in one process on a machine of that many): each call's
	// duration is divided by max(1, n/Cores) before the fit, n the ranks
	// computing during it (its own included, on average over its time,
	// sim.Sharing), which gives the costs of calls alone that
	// sim.RunShared scales back up by the sharing its timeline shows.
	Cores int
	// RecomputeCost is, per stage of the trace (before Copies folds
	// them), the share of the stage's R one RECOMPUTE of it cost in the
	// traced program (ir.Program.RecomputeCostPart; `ppgen tune
	// -recompute-cost`): each R call is divided by it, so that R is the
	// whole stage's. nil, or an entry of 0: the trace's (otherData
	// recompute_cost), else 1. An entry outside [0, 1] is refused.
	RecomputeCost []float64
}

// Stage is one stage's fitted costs.
type Stage struct {
	Rank    int     // the rank its calls ran on (-1: several)
	F, I, W float64 // the median call of each kind, ms (I and W 0 when B is fitted)
	Calls   [3]int  // the calls of each kind (F, I, W) the medians are of
	// B is the median full backward, ms, fitted when the stage has B
	// calls and no I or W (0 otherwise); BCalls counts its B calls.
	B      float64
	BCalls int
	// R is the stage's whole recompute cost, ms, when it has RECOMPUTE
	// calls (RCalls counts them): the median call divided by RShare,
	// written as the layer's "R".
	R      float64
	RCalls int
	// RShare is the share of the stage's R each of its RECOMPUTE calls
	// re-ran (Options.RecomputeCost or the trace's; 1: the whole stage).
	RShare float64
	Act    float64 // the median activation send, KiB (1: none sent)
}

// Full reports whether the stage was fitted its full backward B (it had
// B calls and no I or W calls) rather than I and W.
func (st Stage) Full() bool { return st.BCalls > 0 && st.Calls[1] == 0 && st.Calls[2] == 0 }

// Fit is the model fitted to a trace.
type Fit struct {
	Schedule string  // the trace's otherData.schedule ("" when absent)
	Stages   []Stage // stage s is layer "stage<s>"
	Copies   int     // the model copies the trace's stages formed (1 or more)
	Calls    int     // the stage calls read
	// Overlapped counts the skipped overlap steps (OVERLAP_F_B, OVERLAP_B_F
	// of a simulated dualpipe trace): one event for a forward and a
	// backward together, whose times cannot be told apart.
	Overlapped int
	Sends      int     // the sends comm and bw are fitted to
	Unsized    int     // of Sends, those without a size: all of them means comm alone, no bw
	Comm       float64 // a send's fixed time, ms
	BW         float64 // KiB per ms (0: infinite)
	// Opt is the optimizer's step (the trainer's OPT_STEP spans, category
	// host), ms: the median span of each rank, the largest of them (every
	// rank leaves the reduction before it together, so the slowest ends the
	// iteration); 0 without spans. OptSteps counts the spans.
	Opt      float64
	OptSteps int
	// AllReduce is a reduction of every rank beyond Comm (sim.Cost's
	// allreduce), ms: each reduction (the n-th ALL_REDUCE span of every
	// rank; the n-th loss span, the loss a trainer gathers after the
	// optimizer, likewise) takes the shortest of its ranks' spans (the
	// others include waiting for the last rank to arrive), and AllReduce
	// is the median of them less Comm (at least 0); 0 without spans.
	// Reductions counts them.
	AllReduce  float64
	Reductions int
	// Each is every call's duration, ms, by kind, stage and micro-batch
	// (Options.Each; nil without).
	Each map[sim.StepKey]float64
}

// Cost is the fitted model as the simulator's cost model: the stages' F,
// I and W (B where the backward was fitted whole), comm, act and bw (act
// only with a bw), opt and allreduce, and each call's duration with
// Options.Each.
func (f Fit) Cost() sim.Cost {
	c := sim.Cost{Comm: f.Comm, BW: f.BW, Opt: f.Opt, AllReduce: f.AllReduce, Each: f.Each}
	for _, st := range f.Stages {
		c.F = append(c.F, st.F)
		if f.BW > 0 { // sizes take no time at infinite bandwidth, and sim refuses them
			c.Act = append(c.Act, st.Act)
		}
		if st.Full() {
			c.B = append(c.B, st.B)
			c.I, c.W = append(c.I, st.B/2), append(c.W, st.B/2) // gen/model's even split
		} else {
			c.B, c.I, c.W = append(c.B, st.I+st.W), append(c.I, st.I), append(c.W, st.W)
		}
	}
	return c
}

// maxTransfer is the largest transfer, in bytes (1 TiB: in KiB within
// sim.MaxCost).
const maxTransfer = 1 << 40

// kinds are the call kinds, in Stage.Calls order, then B (the full
// backward of a schedule without split backwards) and R (RECOMPUTE).
const kinds = "FIWBR"

// kindB and kindR are B's and R's indices in kinds.
const (
	kindB = 3
	kindR = 4
)

// Read reads a trace and fits a model to it.
func Read(r io.Reader, opt Options) (Fit, error) {
	if opt.Stages < 0 || opt.Stages > ir.MaxIndex+1 {
		return Fit{}, fmt.Errorf("tune: -stages %d; want 0 (any) or 1 to %d", opt.Stages, ir.MaxIndex+1)
	}
	if opt.Cores < 0 || opt.Cores > ir.MaxIndex+1 {
		return Fit{}, fmt.Errorf("tune: %d cores; want 0 (not shared) or 1 to %d", opt.Cores, ir.MaxIndex+1)
	}
	for s, v := range opt.RecomputeCost {
		if !(v >= 0 && v <= 1) {
			return Fit{}, fmt.Errorf("tune: -recompute-cost: stage %d's share %v; want the share of the stage's R one RECOMPUTE costs, in (0, 1] (0: the trace's, else 1)", s, v)
		}
	}
	if opt.Copies < 0 || opt.Copies > ir.MaxIndex+1 {
		return Fit{}, fmt.Errorf("tune: -copies %d; want 0 or 1 (one model copy), or the copies the stages form (dualpipe: 2)", opt.Copies)
	}
	f, err := chrometrace.Read(r, chrometrace.Limits{Bytes: MaxBytes, Events: MaxEvents})
	if err != nil {
		return Fit{}, fmt.Errorf("tune: %w", err)
	}
	return fit(f, opt)
}

// call is one stage call of the trace.
type call struct {
	stage, rank, kind int
	micro             int     // -1: not given
	ts, dur           float64 // µs
}

func fit(f chrometrace.File, opt Options) (Fit, error) {
	var calls []call
	var sends []send
	var spans []span
	var out Fit
	stages := 0
	for i, e := range f.Events {
		if e.Ph == chrometrace.Complete && e.Cat == "comm" {
			s, ok, err := sendOf(e)
			if err != nil {
				return Fit{}, fmt.Errorf("tune: event %d (%q): %w", i, clip(e.Name), err)
			}
			if ok {
				sends = append(sends, s)
			}
			continue
		}
		if e.Ph == chrometrace.Complete && e.Cat == "host" && !simRecompute(e) { // a simulated RECOMPUTE is a stage call
			sp, ok, err := spanOf(e)
			if err != nil {
				return Fit{}, fmt.Errorf("tune: event %d (%q): %w", i, clip(e.Name), err)
			}
			if ok {
				spans = append(spans, sp)
			}
			continue
		}
		if e.Ph != chrometrace.Complete || (e.Cat != "compute" && !simRecompute(e)) {
			continue // names, sort order, and any other category
		}
		if overlapped(e) {
			out.Overlapped++
			continue
		}
		c, err := stageCall(e)
		if err != nil {
			return Fit{}, fmt.Errorf("tune: event %d (%q): %w", i, clip(e.Name), err)
		}
		calls = append(calls, c)
		stages = max(stages, c.stage+1)
	}
	if len(calls) == 0 {
		return Fit{}, errors.New(`tune: the trace holds no stage calls; want the measured timeline of a training step (pipe.Timeline.WriteTrace, the -trace of examples/mlp): complete events of category "compute" with args stage and kind`)
	}
	if opt.Stages != 0 && stages != opt.Stages {
		return Fit{}, fmt.Errorf("tune: the trace has calls of %d stages but -stages is %d; trace a run of the schedule the model is for", stages, opt.Stages)
	}
	copies := max(opt.Copies, 1)
	if seen, known := copiesOf(calls, stages); known {
		switch {
		case opt.Copies == 0:
			copies = seen
		case opt.Copies != seen:
			how := "run stages of both halves: one model copy"
			if seen > 1 {
				how = fmt.Sprintf("each run one half of them: %d model copies", seen)
			}
			return Fit{}, fmt.Errorf("tune: -copies %d, but the trace's micro-batches, over its %d stages, %s; leave -copies out (tune reads it from the micro-batches) or trace the schedule the model is for", opt.Copies, stages, how)
		}
	}
	if opt.Cores > 0 {
		alone(calls, opt.Cores)
	}
	shares, err := recomputeShares(f.OtherData, opt.RecomputeCost, stages)
	if err != nil {
		return Fit{}, err
	}
	for i := range calls {
		c := &calls[i]
		if c.kind != kindR {
			continue
		}
		if shares[c.stage] < 0 {
			return Fit{}, fmt.Errorf("tune: stage %d has RECOMPUTE calls of the layers a -model file marks (the trace's otherData.recompute_cost_unknown), whose share of the stage's R the trace does not record (its Spec has no RecomputeCost: regenerate the program with go generate, whose Spec carries it); give it with -recompute-cost (ppgen sim prints it: recomputed layers: stage %d ... R SHARE)", c.stage, c.stage)
		}
		c.dur /= shares[c.stage] // the whole stage's R
	}
	if opt.Each {
		out.Each = eachCall(calls)
	}
	if copies > 1 {
		if stages%copies != 0 {
			return Fit{}, fmt.Errorf("tune: the trace's %d stages do not form %d model copies", stages, copies)
		}
		stages /= copies // stage s runs the layers of stage s mod stages
		for i := range calls {
			calls[i].stage %= stages
		}
		for i := range sends {
			sends[i].stage %= stages
		}
	}
	durs := make([][len(kinds)][]float64, stages)
	out.Stages, out.Calls, out.Copies = make([]Stage, stages), len(calls), copies
	for s := range out.Stages {
		out.Stages[s].Rank = -2 // none yet
	}
	for _, c := range calls {
		d := &durs[c.stage][c.kind]
		*d = append(*d, c.dur)
		st := &out.Stages[c.stage]
		switch st.Rank {
		case -2:
			st.Rank = c.rank
		case c.rank, -1:
		default:
			st.Rank = -1
		}
	}
	typical := median
	if opt.Mean {
		typical = mean
	}
	for s := range out.Stages {
		st := &out.Stages[s]
		st.BCalls = len(durs[s][kindB])
		if st.RCalls = len(durs[s][kindR]); st.RCalls > 0 {
			st.R = typical(durs[s][kindR]) / 1e3
			st.RShare = 1
			for c := s; c < len(shares); c += stages { // each copy's stage (Copies)
				if shares[c] > 0 && shares[c] < 1 {
					st.RShare = shares[c]
				}
			}
		}
		for k := range st.Calls {
			st.Calls[k] = len(durs[s][k])
		}
		if st.Full() {
			st.B = typical(durs[s][kindB]) / 1e3
		}
		for k, dst := range []*float64{&st.F, &st.I, &st.W} {
			n := st.Calls[k]
			if n == 0 && st.Full() && k > 0 {
				continue // the B fitted above
			}
			if n == 0 {
				why := "trace a training step (not a forward-only run) of the whole pipeline"
				if out.Overlapped > 0 {
					why = fmt.Sprintf("%d overlap steps were skipped (a forward and a backward in one event, their times not told apart): trace a schedule that does not overlap them", out.Overlapped)
				}
				return Fit{}, fmt.Errorf("tune: stage %d has no %c calls (of %d stages); a model needs every stage's F, and I and W or B: %s", s, kinds[k], stages, why)
			}
			*dst = typical(durs[s][k]) / 1e3
		}
	}
	acts := make([][]float64, stages)
	for _, s := range sends {
		if s.act && s.sized && s.stage < stages {
			acts[s.stage] = append(acts[s.stage], s.kib)
		}
	}
	for s := range out.Stages {
		out.Stages[s].Act = 1
		if len(acts[s]) > 0 {
			out.Stages[s].Act = median(acts[s])
		}
	}
	out.Sends = len(sends)
	for _, s := range sends {
		if !s.sized {
			out.Unsized++
		}
	}
	out.Comm, out.BW = fitComm(sends)
	out.Opt, out.OptSteps, out.AllReduce, out.Reductions = fitHost(spans, out.Comm)
	if m, ok := f.OtherData.(map[string]any); ok {
		if name, ok := m["schedule"].(string); ok && len(name) <= 256 {
			out.Schedule = name
		}
	}
	return out, nil
}

// overlapped reports whether e is an overlap step of a simulated trace
// (args.kind OVERLAP_F_B or OVERLAP_B_F).
func overlapped(e chrometrace.Event) bool {
	args, _ := e.ArgMap()
	k, _ := args["kind"].(string)
	return k == "OVERLAP_F_B" || k == "OVERLAP_B_F"
}

// simRecompute reports whether e is a RECOMPUTE of a simulated trace: a
// host event whose args.kind is RECOMPUTE.
func simRecompute(e chrometrace.Event) bool {
	if e.Cat != "host" {
		return false
	}
	args, _ := e.ArgMap()
	k, _ := args["kind"].(string)
	return k == "RECOMPUTE"
}

// stageCall reads one compute event: its stage and kind (args), rank (pid)
// and duration, each checked.
func stageCall(e chrometrace.Event) (call, error) {
	args, ok := e.ArgMap()
	if !ok {
		return call{}, errors.New(`no args object; a stage call has args {"stage": S, "kind": "F"|"I"|"W"}`)
	}
	stage, err := index(args["stage"], "args.stage")
	if err != nil {
		return call{}, err
	}
	kind, _ := args["kind"].(string)
	k := -1
	if kind == "RECOMPUTE" {
		kind = "R" // a simulated trace's
	}
	if len(kind) == 1 {
		k = bytes.IndexByte([]byte(kinds), kind[0])
	}
	if k < 0 {
		return call{}, fmt.Errorf("args.kind %q; want F, I, W, B or R", clip(fmt.Sprint(args["kind"])))
	}
	micro := -1
	if v, ok := args["micro"]; ok {
		if micro, err = index(v, "args.micro"); err != nil {
			return call{}, err
		}
	}
	if e.Pid < 0 || e.Pid > ir.MaxIndex {
		return call{}, fmt.Errorf("pid (the rank) %d; want 0 to %d", e.Pid, ir.MaxIndex)
	}
	if e.Ts == nil || math.IsNaN(*e.Ts) || math.IsInf(*e.Ts, 0) {
		return call{}, errors.New("no finite ts")
	}
	dur := 0.0 // the writer leaves out a zero duration
	if e.Dur != nil {
		dur = *e.Dur
	}
	if !(dur >= 0 && dur <= MaxDur) { // NaN fails both
		return call{}, fmt.Errorf("dur = %g µs; want a finite duration in [0, %g]", dur, float64(MaxDur))
	}
	return call{stage: stage, rank: e.Pid, kind: k, micro: micro, ts: *e.Ts, dur: dur}, nil
}

// alone divides each call's duration by max(1, n/cores), n the ranks
// computing during it (sim.Sharing of the calls as a timeline).
func alone(calls []call, cores int) {
	evs := make([]sim.Event, len(calls))
	for i, c := range calls {
		evs[i] = sim.Event{Rank: c.rank, Step: ir.Step{Kind: callKinds[c.kind]}, Start: c.ts, End: c.ts + c.dur}
	}
	for i, n := range sim.Sharing(evs) {
		calls[i].dur /= max(1, n/float64(cores))
	}
}

// callKinds are the program's kinds of the calls, in kinds order.
var callKinds = [...]ir.Kind{ir.Forward, ir.BackwardInput, ir.BackwardWeight, ir.Backward, abi.Recompute}

// recomputeShares returns, per stage of the trace, the share of its R one
// RECOMPUTE costs: given's entry when positive, else the trace's
// otherData.recompute_cost, else 1; -1 for a stage the trace lists in
// otherData.recompute_cost_unknown (and given leaves out).
func recomputeShares(other any, given []float64, stages int) ([]float64, error) {
	if len(given) > stages {
		return nil, fmt.Errorf("tune: -recompute-cost gives %d stages' shares; the trace has %d stages", len(given), stages)
	}
	out := make([]float64, stages)
	for s := range out {
		out[s] = 1
	}
	m, _ := other.(map[string]any)
	if list, ok := m["recompute_cost"]; ok {
		vs, ok := list.([]any)
		if !ok || len(vs) != stages {
			return nil, fmt.Errorf("tune: otherData.recompute_cost is %s; want one share per stage of the trace's %d", clip(fmt.Sprint(list)), stages)
		}
		for s, v := range vs {
			f, ok := v.(float64)
			if !ok || !(f > 0 && f <= 1) {
				return nil, fmt.Errorf("tune: otherData.recompute_cost[%d] is %s; want a share in (0, 1]", s, clip(fmt.Sprint(v)))
			}
			out[s] = f
		}
	}
	if list, ok := m["recompute_cost_unknown"]; ok {
		vs, ok := list.([]any)
		if !ok {
			return nil, fmt.Errorf("tune: otherData.recompute_cost_unknown is %s; want a list of stages", clip(fmt.Sprint(list)))
		}
		for _, v := range vs {
			s, err := index(v, "otherData.recompute_cost_unknown")
			if err != nil {
				return nil, err
			}
			if s < stages {
				out[s] = -1
			}
		}
	}
	for s, f := range given {
		if f > 0 {
			out[s] = f
		}
	}
	return out, nil
}

// eachCall is the mean duration (ms) of the calls of each kind, stage and
// micro-batch, of the calls that name one.
func eachCall(calls []call) map[sim.StepKey]float64 {
	sum := map[sim.StepKey]float64{}
	n := map[sim.StepKey]int{}
	for _, c := range calls {
		if c.micro < 0 {
			continue
		}
		k := sim.StepKey{Kind: callKinds[c.kind], Stage: c.stage, Micro: c.micro}
		sum[k] += c.dur / 1e3
		n[k]++
	}
	for k := range sum {
		sum[k] /= float64(n[k])
	}
	return sum
}

// copiesOf reads the model copies the calls' S stages form from their
// micro-batches: 2 when S is even, every micro-batch runs stages of one
// half only and both halves run some, else 1; known is false when a call
// names no micro-batch.
func copiesOf(calls []call, stages int) (copies int, known bool) {
	const several = 2
	half := make(map[int]int) // micro-batch → the half of the stages it runs (several: both)
	used := [2]bool{}
	for _, c := range calls {
		if c.micro < 0 {
			return 0, false
		}
		h := 0
		if 2*c.stage >= stages {
			h = 1
		}
		used[h] = true
		if was, seen := half[c.micro]; !seen {
			half[c.micro] = h
		} else if was != h {
			half[c.micro] = several
		}
	}
	if stages%2 != 0 || !used[0] || !used[1] {
		return 1, true
	}
	for _, h := range half {
		if h == several {
			return 1, true
		}
	}
	return 2, true
}

// send is one activation or gradient send of the trace.
type send struct {
	stage int
	act   bool    // SEND_F: the stage's output activation
	kib   float64 // its size
	sized bool    // the trace gave its size (args.bytes)
	ms    float64 // its time
}

// sendOf reads a comm event: a send of an activation or gradient (ok),
// or another transfer (a receive, a label or input send), skipped. Its
// stage, size and duration are checked. A send is runtime/pipe's
// (args.kind "send", args.op SEND_F or SEND_B) or ppgen trace's (args.kind
// SEND_F or SEND_B, no op); one without args.bytes has no size.
func sendOf(e chrometrace.Event) (send, bool, error) {
	args, ok := e.ArgMap()
	if !ok {
		return send{}, false, errors.New(`no args object; a transfer has args {"stage": S, "kind": "send"|"recv", "op": ..., "bytes": N}`)
	}
	op, hasOp := args["op"].(string)
	kind, _ := args["kind"].(string)
	if !hasOp {
		op, kind = kind, "send" // ppgen trace's form
	}
	if kind != "send" || (op != "SEND_F" && op != "SEND_B") {
		return send{}, false, nil
	}
	stage, err := index(args["stage"], "args.stage")
	if err != nil {
		return send{}, false, err
	}
	raw, sized := args["bytes"]
	b, ok := raw.(float64)
	if sized && (!ok || b != math.Trunc(b) || b < 0 || b > maxTransfer) {
		return send{}, false, fmt.Errorf("args.bytes = %v; want an integer from 0 to %d", clip(fmt.Sprint(raw)), int64(maxTransfer))
	}
	dur := 0.0
	if e.Dur != nil {
		dur = *e.Dur
	}
	if !(dur >= 0 && dur <= MaxDur) {
		return send{}, false, fmt.Errorf("dur = %g µs; want a finite duration in [0, %g]", dur, float64(MaxDur))
	}
	return send{stage: stage, act: op == "SEND_F", kib: b / 1024, ms: dur / 1e3, sized: sized}, true, nil
}

// fitComm fits time = comm + size/bw to the sends: a least-squares line
// through the median send of each size (so that the many sends of one
// size do not outvote the others, and their outliers do not count). With
// fewer than two sizes, or a line that does not rise, bw is 0 (infinite)
// and comm the median send; a line that crosses 0 above size 0 gives
// comm 0. bw is kept within [sim.MinBW, sim.MaxCost] (0 otherwise). The
// line is fitted to the sends with a size; when none has one, comm is the
// median send and bw 0.
func fitComm(sends []send) (comm, bw float64) {
	if len(sends) == 0 {
		return 0, 0
	}
	if sized := slices.DeleteFunc(slices.Clone(sends), func(s send) bool { return !s.sized }); len(sized) > 0 {
		sends = sized
	}
	bySize := map[float64][]float64{}
	all := make([]float64, len(sends))
	for i, s := range sends {
		bySize[s.kib] = append(bySize[s.kib], s.ms)
		all[i] = s.ms
	}
	flat := min(median(all), sim.MaxCost)
	if len(bySize) < 2 {
		return flat, 0
	}
	var n, sx, sy, sxx, sxy float64
	for x, ys := range bySize {
		y := median(ys)
		n++
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	den := n*sxx - sx*sx
	if !(den > 0) {
		return flat, 0
	}
	slope := (n*sxy - sx*sy) / den
	if !(slope > 0) || 1/slope < sim.MinBW || 1/slope > sim.MaxCost {
		return flat, 0
	}
	icept := (sy - slope*sx) / n
	return min(max(icept, 0), sim.MaxCost), 1 / slope
}

// index reads a stage number: an integer in [0, ir.MaxIndex].
func index(v any, what string) (int, error) {
	x, ok := v.(float64)
	if !ok || x != math.Trunc(x) || x < 0 || x > ir.MaxIndex {
		return 0, fmt.Errorf("%s = %v; want an integer from 0 to %d", what, clip(fmt.Sprint(v)), ir.MaxIndex)
	}
	return int(x), nil
}

// median is the median of xs (the mean of the middle two of an even
// count); xs is sorted in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// mean is the mean of xs.
func mean(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// JSON is the fitted model as a model description (docs/model.md), one
// layer per stage on a line of its own; gen/model reads it back.
func (f Fit) JSON() []byte {
	var b bytes.Buffer
	b.WriteString("{\"layers\": [\n")
	for s, st := range f.Stages {
		r := ""
		if st.RCalls > 0 {
			r = ", \"R\": " + num(st.R)
		}
		if st.Full() {
			fmt.Fprintf(&b, "  {\"name\": \"stage%d\", \"F\": %s, \"B\": %s%s, \"act\": %s, \"params\": 1}", s, num(st.F), num(st.B), r, num(st.Act))
		} else {
			fmt.Fprintf(&b, "  {\"name\": \"stage%d\", \"F\": %s, \"I\": %s, \"W\": %s%s, \"act\": %s, \"params\": 1}", s, num(st.F), num(st.I), num(st.W), r, num(st.Act))
		}
		if s < len(f.Stages)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]")
	if f.Comm > 0 {
		fmt.Fprintf(&b, ",\n \"comm\": %s", num(f.Comm))
	}
	if f.BW > 0 {
		fmt.Fprintf(&b, ", \"bw\": %s", num(f.BW))
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// num writes a cost (ms) to 4 significant digits (a median is no more
// precise than that on a shared machine), at most sim.MaxCost: MaxDur µs.
func num(v float64) string {
	return strconv.FormatFloat(min(v, sim.MaxCost), 'g', 4, 64)
}
