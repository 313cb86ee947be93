package sim

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// Cost is the cost model: how long each step takes, in abstract time units
// (the Chrome trace reads one unit as one millisecond).
//
// F, B, I and W are per-stage costs: a slice of length 1 applies to every
// stage, otherwise it must hold one value per stage. A nil slice is derived
// (see Resolve), so the zero Cost is the default cost F=1, B=2, W=1 (I=1),
// comm=0.
//
// The backward costs, per stage. B is the full backward (input and weight
// gradients, one B step); I is the input-gradient half and W the
// weight-gradient half of a split backward (I and W steps), so B = I + W.
// Each key not given keeps its default, F=1, B=2, W=1, and I=B−W (so I=1):
// giving B alone (B=3) keeps W=1 and makes I=2; B and I give W = B − I; I
// without B gives B = I + W (I=3 keeps W=1 and makes B=4). An I or W
// derived below 0 is an error that asks for a smaller part or the other
// one, and B, I and W all given with B ≠ I + W (beyond a relative 1e-9) an
// error that asks for B = I + W, as a -model layer's are.
//
// Every value must be finite and within [0, MaxCost]; bw is 0 (infinite
// bandwidth) or within [MinBW, MaxCost].
type Cost struct {
	F, B, I, W []float64

	// Comm is the latency of one point-to-point transfer (SEND/RECV pair,
	// DATA_SEND/DATA_RECV pair), and of a cross-rank dependency of a
	// compute-only program.
	Comm float64
	// DataLoad is the cost of a DATA_LOAD step (host-blocking).
	DataLoad float64
	// Overlap is the part of the shorter sub-step of an OVERLAP_F_B /
	// OVERLAP_B_F step that is not hidden behind the longer one: the overlap
	// takes max(a, b) + Overlap·min(a, b). 0 (the default) is perfect
	// overlap, 1 is serial execution. Must lie in [0, 1].
	Overlap float64
	// Unshard is the cost of an UNSHARD step (the FSDP all-gather), which
	// runs on the rank's FSDP stream while the host goes on (the compute
	// on its stage waits for it); Reduce of a REDUCE_GRAD step and Opt of
	// OPT_STEP, both host-blocking. RESHARD is free.
	Unshard, Reduce, Opt float64
	// Swap is the duration of one swap transfer (SWAP_LAUNCH_OFFLOAD or
	// SWAP_LAUNCH_LOAD), which runs on the rank's swap stream.
	Swap float64

	// Act is the size of each stage's output activation (one value for
	// every stage, or one per stage), in any unit of data, and BW the
	// link's bandwidth in that unit per time unit. With BW > 0 an
	// activation or gradient transfer takes Comm + size/BW: SEND_F/RECV_F
	// of stage s's output carry Act[s], SEND_B/RECV_B of its input gradient
	// Act[s-1] (the gradient is the size of the activation it is taken
	// with respect to); data and owned-input transfers take Comm (labels
	// and token ids are small). BW = 0 (the default) is infinite bandwidth,
	// and then Act does not matter.
	Act []float64
	BW  float64

	// Param is each stage's parameter size (one value for every stage, or
	// one per stage), in Act's unit, and DP the size of the data-parallel
	// group each stage is sharded over. With DP > 1 and BW > 0 the
	// collectives of FSDP cost what a ring costs: UNSHARD of stage s (an
	// all-gather) and its REDUCE_GRAD (a reduce-scatter) each take, on top
	// of Unshard and Reduce, (DP−1)·Comm + (DP−1)/DP · Param[s]/BW: DP−1
	// steps, each moving 1/DP of the parameters over the link. So the
	// simulator (and the auto scheduler and -fsdp-prefetch choices it
	// times) sees the all-gathers grow with the parameters and the group.
	Param []float64
	DP    float64

	// AllReduce is the time an ALL_REDUCE (a reduction of every rank, -clip)
	// takes beyond Comm, the latency it always costs: the reduction itself
	// (a few numbers for a gradient norm, so 0 by default). Every rank
	// starts it together, once all have reached it with their transfers
	// done (AllReduceTime).
	AllReduce float64
	// Pre is the time of the preprocess forward (a frozen tower, or the
	// first layers of the model kept out of the stages; docs/mpipe.md) that
	// runs where a micro-batch's input is loaded: it adds to every
	// DATA_LOAD of stage 0, on the first stage's rank or, under mpipe, on
	// the micro-batch's owner. 0 (the default): no preprocess.
	Pre float64
	// PreB is the time of a trainable preprocess's backward per input
	// load (pipe.Config.Tower with owner backward): it runs at OPT_STEP,
	// on the rank that loaded the input, after the first stage's rank sent
	// it the input's gradient, and the replicas' gradients are then summed
	// across the ranks (tower.go). 0 (the default): no trainable tower,
	// and OPT_STEP costs opt alone.
	PreB float64

	// R is the cost of a RECOMPUTE step of each stage (-recompute: it
	// re-runs the stage's forward to rebuild the activations its F
	// dropped), one value for every stage or one per stage; nil (the
	// default) is the stage's F. Resolve keeps it nil when not given.
	R []float64

	// Each, when not nil, gives compute steps their own durations by
	// kind (F, B, I, W), stage and micro-batch, over the stages' F, B, I
	// and W: a replay of the calls a run measured (gen/tune's
	// Options.Each, examples/charlm -realise). A step it does not hold
	// keeps its stage's cost. It has no command-line key.
	Each map[StepKey]float64
}

// StepKey names a compute step of a program: its kind, stage and
// micro-batch (Cost.Each).
type StepKey struct {
	Kind         ir.Kind
	Stage, Micro int
}

// MaxCost bounds every value of a cost model: far beyond any real ratio
// of step costs, and small enough that a makespan over ir.MaxSteps steps
// stays finite.
const MaxCost = 1e9

// MinBW is the least non-zero bandwidth (bw): act/bw then stays within
// MaxCost/MinBW.
const MinBW = 1e-9

// MaxDP bounds dp, the data-parallel group size of the collective costs.
const MaxDP = 1 << 16

// DefaultCost returns the resolved default cost: F=1, B=2, I=1, W=1 on every
// stage, every other cost 0.
func DefaultCost() Cost {
	c, _ := Cost{}.Resolve(0) // the default cannot fail
	return c
}

// KindKey is the per-stage cost key of a step kind priced apart from F, B,
// I and W: one value for every stage or one per stage, in -cost and in a
// -model layer (gen/model sums a stage's layers; gen/pricing repeats it
// per model copy and scales it per share as F is). Not given, a step of
// the kind costs what a step of Default of its stage costs, and the list
// stays nil. The code that reads and combines costs handles every KindKey
// alike; a kind with its own price adds its row to kindKeys and its field
// to Cost, and nothing else.
type KindKey struct {
	Key     string   // the key ("R")
	Kind    abi.Kind // the kind it prices (RECOMPUTE)
	Default abi.Kind // the compute kind whose cost it takes when not given (F)
	list    func(*Cost) *[]float64
}

// List returns the per-stage list of c that k prices (nil when not given).
func (k KindKey) List(c *Cost) *[]float64 { return k.list(c) }

// kindKeys are the KindKeys, in the order String writes them after the
// other keys.
var kindKeys = []KindKey{
	{"R", abi.Recompute, abi.Forward, func(c *Cost) *[]float64 { return &c.R }},
}

// KindKeys returns the per-stage cost keys of step kinds beyond F, B, I and W.
func KindKeys() []KindKey { return kindKeys }

// kindKeyOf indexes kindKeys by the kind they price (StepCost's one load).
var kindKeyOf = func() (t [256]*KindKey) {
	for i := range kindKeys {
		t[kindKeys[i].Kind] = &kindKeys[i]
	}
	return t
}()

// kindKey returns the KindKey named key (canonical), ok false for others.
func kindKey(key string) (KindKey, bool) {
	for _, k := range kindKeys {
		if k.Key == key {
			return k, true
		}
	}
	return KindKey{}, false
}

// costKeys lists the keys ParseCost accepts, in the order String writes them
// (act and bw only when bw > 0, so that the common form stays short), the
// KindKeys, then pre.
var costKeys = func() []string {
	keys := []string{"F", "B", "I", "W", "comm", "data", "overlap", "unshard", "reduce", "opt", "swap", "act", "bw", "param", "dp", "allreduce"}
	for _, k := range kindKeys {
		keys = append(keys, k.Key)
	}
	return append(keys, "pre", "preb")
}()

// scalarKeys are the keys of costKeys that take one value.
var scalarKeys = []string{"comm", "data", "overlap", "unshard", "reduce", "opt", "swap", "bw", "dp", "allreduce", "pre", "preb"}

// ParseCost parses the command-line form of a cost model: comma-separated
// key=value pairs such as "F=1,B=2,W=1,comm=0". F, B, I, W and act take
// either one value or a colon-separated list with one value per stage
// ("F=1:1:1:1.4"), as do param and R (RECOMPUTE; default F); the scalar keys are comm, data
// (DATA_LOAD), overlap, unshard, reduce, opt, swap, bw, dp, allreduce (ALL_REDUCE beyond comm) pre (the preprocess forward of each stage-0 DATA_LOAD) and preb (a trainable preprocess's backward per input load, at OPT_STEP). Keys are case-insensitive. Keys not
// given keep their defaults: F=1, B=2, W=1, I=B−W, every other key 0, and
// B = I + W always holds (a key of the three not given is derived from the
// other two; see Cost). Values must be finite numbers in [0, MaxCost] (overlap in [0, 1];
// bw 0 or at least MinBW). stages ≤ 0 means the number of stages is not
// known yet: lists of any length are kept and Run checks them against the
// program; a list has at most ir.MaxIndex+1 values.
func ParseCost(spec string, stages int) (Cost, error) {
	var c Cost
	seen := map[string]bool{}
	for _, field := range strings.Split(spec, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		key, val, ok := strings.Cut(field, "=")
		if !ok {
			return Cost{}, fmt.Errorf("cost %q: %q is not key=value; want e.g. F=1,B=2,W=1,comm=0", clipSpec(spec), clipSpec(field))
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		canon := canonicalKey(key)
		if canon == "" {
			return Cost{}, fmt.Errorf("cost %q: unknown key %q; valid keys are %s", clipSpec(spec), clipSpec(key), strings.Join(costKeys, ", "))
		}
		if seen[canon] {
			return Cost{}, fmt.Errorf("cost %q: key %s given twice", clipSpec(spec), canon)
		}
		seen[canon] = true
		_, perKind := kindKey(canon)
		switch {
		case perKind || canon == "F" || canon == "B" || canon == "I" || canon == "W" || canon == "act" || canon == "param":
			if n := strings.Count(val, ":") + 1; n > ir.MaxIndex+1 {
				return Cost{}, fmt.Errorf("cost: %s has %d values; a program has at most %d stages", canon, n, ir.MaxIndex+1)
			}
			parts := strings.Split(val, ":")
			if stages > 0 && len(parts) != 1 && len(parts) != stages {
				return Cost{}, fmt.Errorf("cost %q: %s has %d values; want 1 (every stage) or %d (one per stage, colon-separated)", clipSpec(spec), canon, len(parts), stages)
			}
			list := make([]float64, len(parts))
			for i, part := range parts {
				v, err := parseCostValue(canon, part)
				if err != nil {
					return Cost{}, fmt.Errorf("cost %q: %w", clipSpec(spec), err)
				}
				list[i] = v
			}
			*c.stageField(canon) = list
		default:
			if strings.Contains(val, ":") {
				return Cost{}, fmt.Errorf("cost %q: %s=%s: %s takes one value, not a per-stage list", clipSpec(spec), canon, clipSpec(val), canon)
			}
			v, err := parseCostValue(canon, val)
			if err != nil {
				return Cost{}, fmt.Errorf("cost %q: %w", clipSpec(spec), err)
			}
			*c.scalarField(canon) = v
		}
	}
	r, err := c.Resolve(stages)
	if err != nil {
		return Cost{}, fmt.Errorf("cost %q: %w", clipSpec(spec), err)
	}
	return r, nil
}

// clipSpec shortens a cost spec for an error message.
func clipSpec(spec string) string {
	if len(spec) > 80 {
		return spec[:77] + "..."
	}
	return spec
}

func canonicalKey(k string) string {
	for _, want := range costKeys {
		if strings.EqualFold(k, want) {
			return want
		}
	}
	return ""
}

func parseCostValue(key, text string) (float64, error) {
	s := clipSpec(text) // for messages
	v, err := strconv.ParseFloat(text, 64)
	if (err != nil && !errors.Is(err, strconv.ErrRange)) || math.IsNaN(v) {
		return 0, fmt.Errorf("%s=%s: %q is not a number; want a finite value in [0, %g] such as 1 or 1.5", key, s, s, float64(MaxCost))
	}
	if v < 0 {
		return 0, fmt.Errorf("%s=%s: costs cannot be negative; want a value in [0, %g]", key, s, float64(MaxCost))
	}
	if err := checkValue(key, v); err != nil {
		return 0, fmt.Errorf("%s=%s: %w", key, s, err)
	}
	return v, nil
}

// checkValue checks one value of key against the allowed range.
func checkValue(key string, v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxCost:
		return fmt.Errorf("%s is %v; want a finite value in [0, %g]", key, v, float64(MaxCost))
	case key == "overlap" && v > 1:
		return fmt.Errorf("overlap is %v; want a fraction in [0, 1] (0 hides the shorter sub-step fully, 1 runs both serially)", v)
	case key == "bw" && v > 0 && v < MinBW:
		return fmt.Errorf("bw is %v; want 0 (infinite bandwidth) or a value in [%g, %g]", v, MinBW, float64(MaxCost))
	case key == "dp" && (v != math.Trunc(v) || v > MaxDP):
		return fmt.Errorf("dp is %v; want a whole number of data-parallel ranks in [0, %d] (0 and 1: no collectives)", v, MaxDP)
	}
	return nil
}

func (c *Cost) stageField(k string) *[]float64 {
	switch k {
	case "act":
		return &c.Act
	case "param":
		return &c.Param
	case "F":
		return &c.F
	case "B":
		return &c.B
	case "I":
		return &c.I
	}
	if kk, ok := kindKey(k); ok {
		return kk.list(c)
	}
	return &c.W
}

func (c *Cost) scalarField(k string) *float64 {
	switch k {
	case "comm":
		return &c.Comm
	case "data":
		return &c.DataLoad
	case "overlap":
		return &c.Overlap
	case "unshard":
		return &c.Unshard
	case "reduce":
		return &c.Reduce
	case "opt":
		return &c.Opt
	case "bw":
		return &c.BW
	case "dp":
		return &c.DP
	case "allreduce":
		return &c.AllReduce
	case "pre":
		return &c.Pre
	case "preb":
		return &c.PreB
	}
	return &c.Swap
}

// Resolve fills the nil per-stage lists by the rule documented on Cost and
// checks every value. With stages > 0 each list must have length 1 or
// stages, and the resolved lists all get that common length (lists of length
// 1 are kept short when every given list has length 1). The receiver is not
// modified.
func (c Cost) Resolve(stages int) (Cost, error) {
	n := 1
	for _, k := range []string{"F", "B", "I", "W"} {
		l := *c.stageField(k)
		if l == nil {
			continue
		}
		if len(l) == 0 {
			return Cost{}, fmt.Errorf("%s has no values; want 1 (every stage) or one per stage", k)
		}
		if len(l) == 1 {
			continue
		}
		if stages > 0 && len(l) != stages {
			return Cost{}, fmt.Errorf("%s has %d values; want 1 (every stage) or %d (one per stage)", k, len(l), stages)
		}
		if n != 1 && len(l) != n {
			return Cost{}, fmt.Errorf("%s has %d values but another per-stage list has %d; per-stage lists must agree", k, len(l), n)
		}
		n = len(l)
		for s, v := range l {
			if err := checkValue(k, v); err != nil {
				return Cost{}, fmt.Errorf("stage %d: %w", s, err)
			}
		}
	}
	for _, k := range []string{"F", "B", "I", "W"} {
		if l := *c.stageField(k); len(l) == 1 {
			if err := checkValue(k, l[0]); err != nil {
				return Cost{}, err
			}
		}
	}
	for k, v := range c.Each {
		if err := checkValue(k.Kind.String(), v); err != nil {
			return Cost{}, fmt.Errorf("stage %d, micro-batch %d: %w", k.Stage, k.Micro, err)
		}
	}
	for _, kk := range kindKeys {
		l := *kk.list(&c)
		if l == nil {
			continue
		}
		if len(l) == 0 || (stages > 0 && len(l) != 1 && len(l) != stages) || (n > 1 && len(l) != 1 && len(l) != n) {
			return Cost{}, fmt.Errorf("%s has %d values; want 1 (every stage) or %d (one per stage, as F, B, I and W have)", kk.Key, len(l), max(stages, n))
		}
		for s, v := range l {
			if err := checkValue(kk.Key, v); err != nil {
				return Cost{}, fmt.Errorf("stage %d: %w", s, err)
			}
		}
	}
	if c.Act != nil && c.BW == 0 {
		return Cost{}, fmt.Errorf("act gives activation sizes but bw is 0 (infinite bandwidth), where sizes take no time; give bw too, e.g. act=1,bw=4")
	}
	if l := c.Act; l != nil {
		if len(l) == 0 || (stages > 0 && len(l) != 1 && len(l) != stages) {
			return Cost{}, fmt.Errorf("act has %d values; want 1 (every stage) or %d (one per stage)", len(l), max(stages, 1))
		}
		for s, v := range l {
			if err := checkValue("act", v); err != nil {
				return Cost{}, fmt.Errorf("stage %d: %w", s, err)
			}
		}
	}
	if c.Param != nil && (c.BW == 0 || c.DP <= 1) {
		return Cost{}, fmt.Errorf("param gives parameter sizes but bw is %v and dp %v, where the collectives take no time; give bw and dp > 1 too, e.g. param=4,bw=4,dp=2", c.BW, c.DP)
	}
	if l := c.Param; l != nil {
		if len(l) == 0 || (stages > 0 && len(l) != 1 && len(l) != stages) {
			return Cost{}, fmt.Errorf("param has %d values; want 1 (every stage) or %d (one per stage)", len(l), max(stages, 1))
		}
		for s, v := range l {
			if err := checkValue("param", v); err != nil {
				return Cost{}, fmt.Errorf("stage %d: %w", s, err)
			}
		}
	}
	for _, k := range scalarKeys {
		if err := checkValue(k, *c.scalarField(k)); err != nil {
			return Cost{}, err
		}
	}
	at := func(l []float64, s int) float64 {
		if len(l) == 1 {
			return l[0]
		}
		return l[s]
	}
	r := c
	r.F, r.B, r.I, r.W = make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for s := 0; s < n; s++ {
		if c.F == nil {
			r.F[s] = 1
		} else {
			r.F[s] = at(c.F, s)
		}
		// B = I + W always: a key not given is derived from the other two
		// (I = B − W, W = B − I, B = I + W), defaults B=2, W=1 filling in
		// the rest; all three given must agree.
		b, w := 2.0, 1.0
		if c.B != nil {
			b = at(c.B, s)
		}
		if c.W != nil {
			w = at(c.W, s)
		}
		var i float64
		switch {
		case c.I == nil:
			i = b - w
			if i < 0 {
				wv := fmt.Sprintf("W=%v", w)
				if c.W == nil {
					wv = fmt.Sprintf("W (default %v)", w)
				}
				return Cost{}, fmt.Errorf("stage %d: I = B − W = %v − %v < 0: %s exceeds B=%v; give W ≤ B, or give I", s, b, w, wv, b)
			}
		case c.B == nil:
			i = at(c.I, s)
			b = i + w
		case c.W == nil:
			i = at(c.I, s)
			if w = b - i; w < 0 {
				return Cost{}, fmt.Errorf("stage %d: W = B − I = %v − %v < 0: I=%v exceeds B=%v; give I ≤ B, or give W", s, b, i, i, b)
			}
		default:
			i = at(c.I, s)
			if math.Abs(i+w-b) > 1e-9*max(1, b) {
				return Cost{}, fmt.Errorf("stage %d: B=%v but I + W = %v + %v = %v (B is the full backward, I then W); give B=%v, or leave one of B, I, W out to have it derived from the other two", s, b, i, w, i+w, i+w)
			}
		}
		r.B[s], r.I[s], r.W[s] = b, i, w
	}
	return r, nil
}

// String writes the cost in the form ParseCost reads, every key present:
// "F=1,B=2,I=1,W=1,comm=0,data=0,overlap=0,unshard=0,reduce=0,opt=0,swap=0".
// Per-stage lists whose values are all equal are written as one value.
func (c Cost) String() string {
	if r, err := c.Resolve(0); err == nil {
		c = r
	}
	var b strings.Builder
	for i, k := range costKeys {
		kk, perKind := kindKey(k)
		if (k == "act" || k == "bw") && c.BW == 0 || k == "act" && len(c.Act) == 0 ||
			k == "param" && len(c.Param) == 0 || k == "dp" && c.DP == 0 || k == "allreduce" && c.AllReduce == 0 || perKind && len(*kk.list(&c)) == 0 || k == "pre" && c.Pre == 0 || k == "preb" && c.PreB == 0 {
			continue // infinite bandwidth: sizes do not matter; or no sizes; or no DP group; or the default
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		if i < 4 || k == "act" || k == "param" || perKind {
			l := *c.stageField(k)
			if allEqual(l) {
				l = l[:min(len(l), 1)]
			}
			for j, v := range l {
				if j > 0 {
					b.WriteByte(':')
				}
				b.WriteString(formatNum(v))
			}
			continue
		}
		b.WriteString(formatNum(*c.scalarField(k)))
	}
	return b.String()
}

func allEqual(l []float64) bool {
	for _, v := range l {
		if v != l[0] {
			return false
		}
	}
	return true
}

func formatNum(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// of returns the per-stage value of a resolved list.
func of(l []float64, stage int) float64 {
	if len(l) == 1 {
		return l[0]
	}
	if stage < 0 || stage >= len(l) {
		return 0
	}
	return l[stage]
}

// StepCost returns the duration the simulator gives a host or compute step
// under the resolved cost c: F, B, I, W per stage; an overlap takes
// max(a, b) + Overlap·min(a, b); DATA_LOAD, UNSHARD (on the FSDP stream),
// REDUCE_GRAD and OPT_STEP their scalar costs; a kind of KindKeys its
// stage's value (RECOMPUTE: R, default F); every other step 0
// (transfers take Comm on their stream, which StepCost does not cover).
func (c *Cost) StepCost(st ir.Step) float64 {
	switch st.Kind {
	case ir.OverlapFB, ir.OverlapBF:
		if len(st.Sub) != 2 {
			return 0
		}
		a, b := c.computeCost(st.Sub[0]), c.computeCost(st.Sub[1])
		return max(a, b) + c.Overlap*min(a, b)
	case ir.DataLoad:
		if st.Stage == 0 {
			return c.DataLoad + c.Pre // an input load runs the preprocess too
		}
		return c.DataLoad
	case ir.Unshard:
		return c.Unshard + c.CollTime(st.Stage)
	case ir.ReduceGrad:
		return c.Reduce + c.CollTime(st.Stage)
	case ir.OptStep:
		return c.Opt
	}
	if kk := kindKeyOf[st.Kind]; kk != nil {
		if l := *kk.list(c); l != nil {
			return of(l, st.Stage)
		}
		return c.computeCost(ir.Step{Kind: kk.Default, Stage: st.Stage})
	}
	return c.computeCost(st)
}

// transfer is the duration of a point-to-point transfer step st: Comm, plus
// the size of what it carries over BW when BW > 0 (see Cost.Act).
func (c *Cost) transfer(st ir.Step) float64 {
	switch st.Kind {
	case ir.SendF, ir.RecvB:
		return c.Comm + c.ActTime(st.Stage)
	case ir.RecvF, ir.SendB:
		return c.Comm + c.ActTime(st.Stage-1)
	}
	return c.Comm
}

// CollTime is the ring cost of one FSDP collective of stage s (the
// all-gather of UNSHARD, the reduce-scatter of REDUCE_GRAD):
// (DP−1)·Comm + (DP−1)/DP · Param[s]/BW; 0 without a DP group (DP ≤ 1),
// with infinite bandwidth or without parameter sizes.
func (c *Cost) CollTime(s int) float64 {
	if c.DP <= 1 || c.BW <= 0 || len(c.Param) == 0 || s < 0 {
		return 0
	}
	p := c.Param[0]
	if len(c.Param) > 1 {
		if s >= len(c.Param) {
			return 0
		}
		p = c.Param[s]
	}
	return (c.DP-1)*c.Comm + (c.DP-1)/c.DP*p/c.BW
}

// TieTime is the time of a tie's gradient exchange between stages a and b
// (TIE_GRAD): Comm, plus the tied parameter over the link when parameter
// sizes and a bandwidth are given, min(Param[a], Param[b])/BW (the tied
// parameter is at most the smaller stage's parameters). Without them it is
// one transfer's latency, Comm.
func (c *Cost) TieTime(a, b int) float64 {
	if c.BW <= 0 || len(c.Param) == 0 || a < 0 || b < 0 {
		return c.Comm
	}
	p := c.Param[0]
	if len(c.Param) > 1 {
		if a >= len(c.Param) || b >= len(c.Param) {
			return c.Comm
		}
		p = min(c.Param[a], c.Param[b])
	}
	return c.Comm + p/c.BW
}

// AllReduceTime is the time of an ALL_REDUCE step: Comm plus AllReduce.
func (c *Cost) AllReduceTime() float64 { return c.Comm + c.AllReduce }

// ActTime is the time stage s's output activation (or the gradient with
// respect to it) takes over the link: Act[s]/BW, 0 with infinite bandwidth
// or no such stage.
func (c *Cost) ActTime(s int) float64 {
	if c.BW <= 0 || len(c.Act) == 0 || s < 0 {
		return 0
	}
	if len(c.Act) == 1 {
		return c.Act[0] / c.BW
	}
	if s >= len(c.Act) {
		return 0
	}
	return c.Act[s] / c.BW
}
