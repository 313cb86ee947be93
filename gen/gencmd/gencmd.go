// Package gencmd is a ppgen command line as a value, the generation
// request: one struct (Request) that every command's flags bind (Bind), what
// it asks for (Config, LowerOptions, Lower), and generation in memory
// (Generate: `ppgen gen`, or `ppgen import` of a PyTorch CSV); what diff,
// check and vet look at (LoadPackages, LoadUnits, Unit.Regenerate: the
// packages of a command line through golang.org/x/tools/go/packages); and
// `ppgen sim -compare` (Request.Compare, a call of gen/auto's Compare).
//
// The CLI (cmd/ppgen), the analyzer (gen/vet) and the vettool
// (cmd/ppgenvet) share it, so a command line means the same thing wherever
// it is read: typed by a user, written in a //go:generate directive, or
// recorded under the header of a generated file (gen/emit's Header,
// Invocation and Recorded; invocation.go reads and records it here).
//
// The recorded invocation lists the flags that were set, in flag-name order,
// without -o, and names the files it reads (-in, -model; an import's file,
// after the flags) relative to the output's directory; with the file's own
// package clause (standing in for $GOPACKAGE) it regenerates the file byte
// for byte (see FromHeader).
package gencmd

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/pricing"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// UsageError is bad input on a command line: a flag value, a missing flag,
// an unreadable -in file. The CLI exits 2 on it.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error {
	return &UsageError{fmt.Sprintf(format, args...)}
}

// Request is a ppgen command line as a value: the schedule it names (or
// the -in file it reads), how to lower it, and for `ppgen gen` and `ppgen
// import` the Go source to emit. Every command's flags bind its fields
// directly (Bind), so each option is set in one place and means the same
// wherever it is read.
type Request struct {
	// Command is what Generate runs: "gen" (the default) or "import".
	Command string

	// The schedule: a family and its size, or an -in file.
	Schedule      string // -schedule
	Ranks         int    // -ranks
	Virtual       int    // -virtual (0: the family's default)
	Micro         int    // -micro
	Placement     string // -placement (loop, v, or a stage->rank table)
	LessMemory    bool   // -less-memory
	Split         bool   // -split
	Overlap       bool   // -overlap
	DxDwInOverlap bool   // -dxdw-in-overlap
	CommOrder     string // -comm-order
	In            string // -in (relative to Env.Dir)
	// Mem and Cost are what -schedule auto chooses by: -mem, and -cost
	// (the cost model of one rank's share of the model). A command that
	// simulates binds -cost with Flags.Cost: it then simulates any
	// schedule by it, and auto chooses by it too.
	Mem  float64
	Cost string
	// Budget is -budget: the simulations each local search of auto's
	// synthesized orders spends at most (auto.Options.Budget; 0: the
	// default). It applies to -schedule auto with -model.
	Budget int
	// Model is -model: a model description (gen/model) whose layers give
	// the per-stage costs of a command that simulates (Pricing), and of
	// -schedule auto's candidates in any command.
	Model string
	// Partition is -partition: how a -model's layers split into a fixed
	// family's stages, even (by count, the default) or auto
	// (gen/partition's split for the family's order, within -mem); with
	// -schedule auto, auto also tries every family with its own.
	Partition string
	FSDP      int // -fsdp: stages unsharded at once per rank (0: no FSDP steps)
	// FSDPPrefetch is -fsdp-prefetch: how many compute steps ahead of its
	// use each UNSHARD is issued (0: right before it; needs -fsdp).
	FSDPPrefetch int
	Swap         int // -swap: least compute steps between a swapped chunk's F and backward (0: no swapping)
	// SwapAuto is -swap auto: -schedule auto chooses the distance under
	// -mem (auto.Options.SwapAuto); Swap is then 0.
	SwapAuto bool
	// ShipLabels is -ship-labels: labels travel along the pipe
	// (DATA_SEND/DATA_RECV) instead of being loaded on the last stage's rank.
	ShipLabels bool
	// MpipeOwners is -mpipe-owners: mpipe's ownership mode, min (the
	// default) or full (passes.ParseOwners).
	MpipeOwners string
	// MpipePre is -mpipe-pre: the preprocess in the -model file, its
	// first T layers or the layers through a named one
	// (model.Model.Preprocess); the stages split the other layers and the
	// simulator costs the preprocess as pre.
	MpipePre string
	// preLayers is the T of -mpipe-pre, resolved by readModel.
	preLayers int
	// Batch is -batch: each run of adjacent transfers of a rank becomes
	// one batch (BATCH_BEGIN .. BATCH_END) that the runtime issues as one
	// group (passes.Coalesce).
	Batch bool
	// ForwardOnly is -forward-only: the forward-only program of the
	// schedule (evaluation, inference: forwards and their transfers, no
	// backward, no OPT_STEP; passes.ForwardOnly).
	ForwardOnly bool
	// Ties is -tie A:B (repeatable, or a comma list): stages that hold one
	// copy each of a shared parameter, whose gradients TIE_GRAD sums before
	// OPT_STEP (passes.Tie). Normalized (A < B) as the flag is read.
	Ties TieFlag
	// Clip is -clip: one ALL_REDUCE on every rank before OPT_STEP, the
	// reduction of the global gradient norm that clipping needs
	// (passes.Clip).
	Clip bool
	// Passes holds the values of the options the lowering passes declare
	// (passes.Declared: -recompute, ...), by name: Bind defines a flag for
	// each, and LowerOptions hands them to the passes (Options.Set).
	Passes map[string]string
	// MaxActivations is -max-activations (verify, import): verify's limit
	// on live chunks per rank (0: none).
	MaxActivations int

	// The Go source (gen, import).
	Out     string // -o as given ("" for the default, "-" for stdout)
	Package string // -package as given
	Table   bool   // -table
	Helper  int    // -helper
	Fuse    bool   // -fuse (gen)
	// Prefix is gen's -name: the prefix of every identifier the file
	// declares (emit.Options.Prefix), so that several programs (train
	// and eval) share one package.
	Prefix string

	// What `ppgen import` reads.
	From     string // -from: torch-csv or torch-csv-legacy
	File     string // the CSV file (relative to Env.Dir; "-" for stdin)
	Name     string // -name: the schedule's name in the Spec
	DropFSDP bool   // -drop-fsdp

	// Invocation is what the generated header records (see Invocation).
	Invocation string
	Env        Env
	// AutoProgress, not a flag, is passed to -schedule auto as
	// auto.Options.Progress.
	AutoProgress func(step string, done, total int)

	// family is the family -schedule names, resolved once
	// (resolveFamily): the registry's own, whose Name is Schedule.
	family *schedules.Family

	// pricing is the price list (Pricing) of the -cost, -model,
	// Env.Dir and -mpipe-pre in pricedFor.
	pricing   *pricing.Pricing
	pricedFor [4]string

	simCost bool // -cost is also the command's simulation cost (Flags.Cost)
	// ranksGiven and microGiven: -ranks and -micro were on the command
	// line, so that a 0 there is told from a flag left out (Config).
	ranksGiven, microGiven bool
}

// givenInt is an int flag that records whether it was set: -ranks and
// -micro, whose 0 is never valid, so that Config can say "missing -ranks"
// for a flag left out and "ranks = 0" for one given as 0. Get returns the
// int, so help prints it as an int flag.
type givenInt struct {
	p     *int
	given *bool
}

func (g *givenInt) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return errors.New("value out of range")
		}
		return errors.New("parse error")
	}
	*g.p, *g.given = int(n), true
	return nil
}

func (g *givenInt) String() string {
	if g == nil || g.p == nil {
		return "0"
	}
	return strconv.Itoa(*g.p)
}

func (g *givenInt) Get() any { return *g.p }

// Flags says which flags Bind defines.
type Flags struct {
	In bool // -in
	// Cost, when not empty, is the usage of the -cost of a command that
	// simulates (sim, trace, report); auto chooses by the same model.
	// Empty: -cost is auto's cost model only.
	Cost           string
	MaxActivations bool // -max-activations
	Output         bool // gen's -o, -package, -table, -helper, -fuse
	// Import defines the flags of `ppgen import` instead of the schedule
	// flags.
	Import bool
}

// Bind defines the flags of a command on fs, storing into r. It holds the
// only definitions of the schedule flags: every command binds them through
// here.
func (r *Request) Bind(fs *flag.FlagSet, which Flags) {
	if which.Import {
		fs.StringVar(&r.From, "from", "", "input format: torch-csv, or torch-csv-legacy (PyTorch 2.4 to 2.6: B = input grad when the chunk has a W, BW = full backward)")
		fs.StringVar(&r.Out, "o", "", "also write the Go source to this file (- for stdout)")
		fs.StringVar(&r.Package, "package", "", "package name of the Go source (default: $GOPACKAGE, else the output directory's name)")
		fs.StringVar(&r.Name, "schedule-name", "", "schedule name in the generated Spec (default: the file's base name)")
		fs.StringVar(&r.Prefix, "name", "", prefixUsage)
		fs.BoolVar(&r.Table, "table", false, "also emit the program as data (pipe.Op table) for the interpreter")
		fs.IntVar(&r.Helper, "helper", 0, "steps per helper function (0: the emitter's default)")
		fs.BoolVar(&r.DropFSDP, "drop-fsdp", false, "drop the FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD) instead of running them through pipe.Sharded")
		r.Fuse = true
	} else {
		r.bindSchedule(fs, which)
	}
	if which.MaxActivations || which.Import {
		fs.IntVar(&r.MaxActivations, "max-activations", 0, "fail when a rank holds more live activations (chunks) than this; 0: no limit")
	}
	if which.Output {
		fs.StringVar(&r.Out, "o", "", "output file (default: $GOFILE's name with _gen.go under go generate, else schedule_gen.go; - for stdout)")
		fs.StringVar(&r.Package, "package", "", "package name (default: $GOPACKAGE, else the output directory's name)")
		fs.BoolVar(&r.Table, "table", false, "also emit the program as data (pipe.Op table) for the interpreter")
		fs.IntVar(&r.Helper, "helper", 0, "calls per helper function (0: the emitter's default)")
		fs.BoolVar(&r.Fuse, "fuse", true, "emit adjacent steps of one chunk (F and its send, a receive and its consumer, ...) as one call; -fuse=false: one call per step")
		fs.StringVar(&r.Prefix, "name", "", prefixUsage)
	}
}

// prefixUsage is the usage of -name, gen's and import's alike.
const prefixUsage = "prefix of every name the file declares (-name Eval: EvalFingerprint, EvalSpec, EvalRanks, EvalRank0, ..., EvalProgram), so that several programs, such as a train and an eval program, share one package; an exported Go identifier (default: none)"

func (r *Request) bindSchedule(fs *flag.FlagSet, which Flags) {
	fs.Var(scheduleName{r}, "schedule", "schedule family, or auto (see `ppgen list`); "+AliasHelp)
	fs.Var(&givenInt{&r.Ranks, &r.ranksGiven}, "ranks", "number of pipeline ranks P")
	fs.IntVar(&r.Virtual, "virtual", 0, "virtual stages per rank V (0: the family's default)")
	fs.Var(&givenInt{&r.Micro, &r.microGiven}, "micro", "number of micro-batches M")
	fs.StringVar(&r.Placement, "placement", "", "stage placement: loop, v, or a stage->rank table such as 1,0,3,2 (default: the family's; gpipe and 1f1b take any table of one stage per rank, the other families only their own)")
	fs.BoolVar(&r.LessMemory, "less-memory", false, "interleaved: smaller warm-up, fewer live activations")
	fs.BoolVar(&r.Split, "split", false, "split every backward B into I (input grad) and W (weight grad)")
	fs.BoolVar(&r.Overlap, "overlap", false, "pair one micro-batch's backward with the next one's forward")
	fs.BoolVar(&r.DxDwInOverlap, "dxdw-in-overlap", false, "inside an overlap, run the backward as I then W")
	fs.StringVar(&r.CommOrder, "comm-order", defaultCommOrder, "how transfers are ordered: timed (by the cost model's ideal timeline), late (receives hoisted only as rendezvous demands) or eager (each receive as early as its producer allows, modelled on PyTorch's _add_send_recv; equal to PyTorch's own lowering for GPipe only)")
	if which.In {
		fs.StringVar(&r.In, "in", "", "read the schedule from a CSV (PyTorch form) or text file instead of -schedule")
	}
	fs.IntVar(&r.FSDP, "fsdp", 0, "add FSDP steps (UNSHARD, RESHARD, REDUCE_GRAD) with at most N stages unsharded per rank at once (0: none)")
	fs.IntVar(&r.FSDPPrefetch, "fsdp-prefetch", 0, "with -fsdp: issue each UNSHARD (all-gather) up to K compute steps before the step that needs it, as far as the -fsdp window allows (0: right before it)")
	fs.Var(swapFlag{&r.Swap, &r.SwapAuto}, "swap", "offload the saved activations of chunks whose forward and backward are at least N compute steps apart (SWAP_* steps; N ≥ 2, 0: none); auto: -schedule auto -mem X chooses N for each candidate beside its recompute policies, priced by -cost swap=.. (docs/memory.md)")
	fs.StringVar(&r.MpipeOwners, "mpipe-owners", "", "mpipe: which micro-batches their owner ranks load and ship to the first stage's rank: min (micro m < min(P, M) by rank m; the first stage's rank loads the rest) or full (every micro m by rank m mod min(P, M)); default min")
	fs.StringVar(&r.MpipePre, "mpipe-pre", "", "with -model: the preprocess (mpipe's transposed block: the first T layers, or the layers through the one named, such as a vision tower) that each input load runs, on its owner rank under mpipe and on the first stage's rank otherwise; the stages split the other layers, and the simulator costs the preprocess's F as -cost's pre")
	fs.BoolVar(&r.ShipLabels, "ship-labels", false, "load each micro-batch's labels with its input on the first stage's rank and ship them along the pipe (DATA_SEND/DATA_RECV before each activation transfer), so that only that rank reads data")
	fs.BoolVar(&r.Batch, "batch", false, "merge each run of adjacent transfers of a rank into one batch (BATCH_BEGIN .. BATCH_END) that the runtime issues as one group")
	fs.BoolVar(&r.ForwardOnly, "forward-only", false, "the schedule's forward-only program (evaluation, inference): its forwards in the family's order, their transfers and data loads, no backward and no OPT_STEP")
	fs.Var(&r.Ties, "tie", "stages A:B share a parameter (an embedding on the first stage tied to the LM head on the last: 0:S-1); TIE_GRAD sums their gradients before OPT_STEP (repeat -tie, or list 0:3,1:2; a stage takes part in one tie; no effect with -forward-only)")
	fs.BoolVar(&r.Clip, "clip", false, "place one ALL_REDUCE on every rank before OPT_STEP: the reduction of the global gradient norm that clipping needs (the trainer's pipe.Config.AllReduce does it; no effect with -forward-only)")
	for _, o := range passes.Declared() {
		fs.Var(passFlag{r, o}, o.Name, o.Usage)
	}
	fs.Float64Var(&r.Mem, "mem", 0, "-schedule auto: activation memory limit, in micro-batches of one rank's share of the model (0: none); with -model, each rank's peak activations plus parameters in the model's units (auto and -partition auto); where it keeps a faster order out, auto also tries recomputing stages (a -recompute policy per candidate; -recompute none: never)")
	if which.Cost != "" {
		r.simCost = true
		fs.StringVar(&r.Cost, "cost", "", which.Cost)
	} else {
		fs.StringVar(&r.Cost, "cost", "", "-schedule auto: the cost model of one rank's share of the model it chooses by, e.g. F=1,B=2,W=1,comm=0 (keys not given keep their defaults F=1, B=2, W=1, I=B-W, the rest 0, and B=I+W; see `ppgen sim -h`); interleaved-zb: the cost of each stage, which its order is built for")
	}
	fs.IntVar(&r.Budget, "budget", 0, fmt.Sprintf("-schedule auto with -model: the most simulations each local search of a synthesized order spends (0: the default, %d, fewer on large programs; at most %d); with -partition auto and -mem, also one synthesis per %d of it climbing the split of the best placement; the annealing of synthesized priorities and the reinsertion of their orders get budget/%d times their default steps; a larger budget may find a faster order and takes up to that many times longer", auto.RepairBudget, auto.MaxBudget, auto.SplitClimbCost, auto.RepairBudget))
	fs.StringVar(&r.Model, "model", "", "a model description (JSON, docs/model.md: per layer F, B or I and W, act, params; comm, bw; `ppgen tune` fits one to a measured trace) whose layers, split into the stages (-partition), give the per-stage costs: of -schedule auto's candidates, and of any schedule sim, trace, report and partition simulate; gen records the split in Spec.Layers; -cost may add the other keys")
	fs.StringVar(&r.Partition, "partition", "", "with -model: even (the layers split evenly by count; the default) or auto (the split that minimises the schedule's simulated makespan within -mem, in the model's units; auto tries both; under -mem without -recompute a family's split is searched with the recompute policies model, selective:0.5 and full too, the fastest that fits kept)")
}

// passFlag is the flag of an option a pass declares (passes.Option): its
// value is the Request's Passes[o.Name], checked by the option as it is
// read.
type passFlag struct {
	r *Request
	o *passes.Option
}

func (f passFlag) String() string {
	if f.r == nil {
		return ""
	}
	return f.r.Passes[f.o.Name]
}

// Get makes passFlag a flag.Getter of a string (help shows its type).
func (f passFlag) Get() any { return f.String() }

func (f passFlag) Set(v string) error {
	if v != "" && f.o.Check != nil {
		if err := f.o.Check(v); err != nil {
			return err
		}
	}
	if f.r.Passes == nil {
		f.r.Passes = map[string]string{}
	}
	f.r.Passes[f.o.Name] = v
	return nil
}

// AliasHelp says, for flag help, that PyTorch's and torchtitan's schedule
// names are accepted.
var AliasHelp = "PyTorch's and torchtitan's names " + strings.Join(aliasNames(), ", ") +
	" (any case, with or without PyTorch's Schedule prefix) name the same families"

// aliasNames lists every family's aliases, in the families' order.
func aliasNames() []string {
	var names []string
	for _, f := range schedules.All() {
		names = append(names, f.Aliases...)
	}
	return names
}

// scheduleName is -schedule's flag.Value: a family's name or an alias of it
// is resolved to the family (schedules.Resolve, the one lookup of the
// family from the flag to the emitted call), which the Request keeps, and
// stored as the family's name, so that what is generated, recorded and
// reported names the family as `ppgen list` does; anything else (auto, a
// name no family has) is stored as given, for Config and Lower to accept
// or refuse.
type scheduleName struct{ r *Request }

func (s scheduleName) String() string {
	if s.r == nil {
		return ""
	}
	return s.r.Schedule
}

// Get makes scheduleName a flag.Getter of a string (help shows its type).
func (s scheduleName) Get() any { return s.String() }

func (s scheduleName) Set(v string) error {
	s.r.Schedule = v
	if fam, ok := s.r.resolveFamily(); ok {
		s.r.Schedule = fam.Name
	}
	return nil
}

// resolveFamily is the family -schedule names (ok false: none, e.g.
// auto), resolved once: by the flag as it is read, or on first use for a
// Request built as a value (or whose Schedule changed since). Config,
// LowerOptions and Lower ask it, and Lower hands the family to
// gen.LowerFamily, so that nothing below looks the name up again.
func (r *Request) resolveFamily() (schedules.Family, bool) {
	if r.family == nil || r.family.Name != r.Schedule {
		fam, err := schedules.Resolve(r.Schedule)
		if err != nil {
			return schedules.Family{}, false
		}
		r.family = fam
	}
	return *r.family, true
}

// Config turns the flags into an ir.Config, checking what the flags alone
// say: a missing -schedule, a malformed -placement. The family checks the
// values (P, V, M ≥ 1 and its own constraints: schedules.Normalize and
// its Build). Its errors are *UsageError.
func (r *Request) Config() (ir.Config, error) {
	if r.Schedule == "" {
		return ir.Config{}, usagef("missing -schedule (one of the names `ppgen list` prints)")
	}
	switch {
	case r.Ranks == 0 && !r.ranksGiven:
		return ir.Config{}, usagef("-ranks is required: give -ranks P, the number of pipeline ranks (processes), e.g. -schedule %s -ranks 4 -micro 8", r.Schedule)
	case r.Micro == 0 && !r.microGiven:
		return ir.Config{}, usagef("-micro is required: give -micro M, the number of micro-batches per training step, e.g. -schedule %s -ranks %d -micro %d", r.Schedule, r.Ranks, 2*max(r.Ranks, 1))
	}
	cfg := ir.Config{
		Schedule: r.Schedule, Ranks: r.Ranks, Virtual: r.Virtual, Micro: r.Micro,
		Options: ir.Options{LessMemory: r.LessMemory},
	}
	if r.Placement != "" {
		v := r.Virtual
		if fam, ok := r.resolveFamily(); ok && v == 0 {
			v = fam.DefaultVirtual // "loop" means the family's V stages per rank
		}
		pl, err := ir.ParsePlacement(r.Placement, r.Ranks, max(v, 1))
		if err != nil {
			// A table one entry short leaves a rank without a stage:
			// say that it is short, not that the rank is empty. (A
			// well-formed table of another length reaches the family,
			// which says what it takes.)
			if lerr := checkTableLen(r.Placement, r.Ranks, max(v, 1)); lerr != nil {
				return ir.Config{}, lerr
			}
			return ir.Config{}, &UsageError{err.Error()}
		}
		cfg.Placement = &pl
	}
	if fam, ok := r.resolveFamily(); ok && fam.UsesCost && (r.Cost != "" || r.Model != "") {
		p, err := r.Pricing()
		if err != nil {
			return ir.Config{}, err
		}
		if cfg.Cost, err = p.Order(cfg.Ranks, cmp.Or(cfg.Virtual, fam.DefaultVirtual)); err != nil {
			return ir.Config{}, usageOf(err)
		}
	}
	return cfg, nil
}

// checkTableLen checks that a -placement table (not loop or v) that
// ir.ParsePlacement refused lists one rank for each of the ranks × virtual
// stages: a table one entry short would otherwise be reported as a rank
// that holds no stage.
func checkTableLen(text string, ranks, virtual int) error {
	if text == "loop" || text == "v" || ranks < 1 || virtual < 1 || ranks > (ir.MaxIndex+1)/virtual {
		return nil // not a table, or sizes ParsePlacement and the family refuse
	}
	stages := ranks * virtual
	n := strings.Count(text, ",") + 1
	if n == stages {
		return nil
	}
	example := make([]string, stages)
	for s := range example {
		example[s] = strconv.Itoa(s % ranks)
	}
	eg := strings.Join(example, ",")
	if stages > 16 {
		eg = strings.Join(example[:16], ",") + ",..."
	}
	if len(text) > 60 {
		text = strings.ToValidUTF8(text[:57], "") + "..."
	}
	return usagef("-placement %q: %d entries for %d stages (P·V = %d × %d); give one rank per stage, such as %s (stage s on rank s mod P)", text, n, stages, ranks, virtual, eg)
}

// LowerOptions turns the flags into lowering options (and, for -schedule
// auto, the search's). Its errors are *UsageError.
func (r *Request) LowerOptions() (auto.Options, error) {
	var opt auto.Options
	if r.FSDP < 0 {
		return opt, usagef("-fsdp = %d; want 0 (no FSDP steps) or the number of stages a rank may hold unsharded at once", r.FSDP)
	}
	opt.Passes.FSDP = r.FSDP
	switch {
	case r.FSDPPrefetch < 0:
		return opt, usagef("-fsdp-prefetch = %d; want 0 (each UNSHARD right before its first use) or the number of compute steps to issue it ahead", r.FSDPPrefetch)
	case r.FSDPPrefetch > 0 && r.FSDP == 0:
		return opt, usagef("-fsdp-prefetch %d needs -fsdp N: it moves the UNSHARD steps that -fsdp adds", r.FSDPPrefetch)
	}
	opt.Passes.FSDPPrefetch = r.FSDPPrefetch
	if r.Swap < 0 || r.Swap == 1 {
		return opt, usagef("-swap = %d; want 0 (no swapping) or at least 2 compute steps between a chunk's forward and its backward", r.Swap)
	}
	opt.Passes.Swap = r.Swap
	if err := r.checkSwapAuto(); err != nil {
		return opt, err
	}
	opt.SwapAuto = r.SwapAuto
	opt.Passes.ShipLabels = r.ShipLabels
	if r.MpipeOwners != "" {
		mode, err := passes.ParseOwners(r.MpipeOwners)
		if err != nil {
			return opt, usagef("-mpipe-owners: %v", err)
		}
		if f, ok := r.resolveFamily(); ok && !f.OwnedData {
			return opt, usagef("-mpipe-owners %s: only mpipe loads micro-batches on their owner ranks, not -schedule %s", r.MpipeOwners, r.Schedule)
		}
		opt.Passes.MpipeOwners = mode
	}
	opt.Passes.Batch = r.Batch
	opt.Passes.ForwardOnly = r.ForwardOnly
	if len(r.Ties) > 0 && r.Schedule == auto.Name {
		return opt, usagef("-tie %s names stages, and -schedule auto chooses how many there are (V per rank); pick the schedule first (ppgen sim -schedule auto prints its choice), then tie its stages", r.Ties.String())
	}
	opt.Passes.Ties = r.Ties
	opt.Passes.ClipNorm = r.Clip
	opt.Passes.Set = maps.Clone(r.Passes)
	opt.Verify.MaxActivations = r.MaxActivations
	fam, _ := r.resolveFamily()
	if r.Schedule != auto.Name && ((r.Mem != 0 && r.Partition != PartitionAuto) || (r.Cost != "" && !r.simCost && !fam.UsesCost) || (r.Model != "" && !r.simCost && r.Command != "gen")) {
		return opt, usagef("-mem, -cost and -model choose among schedules: they apply to -schedule auto only, -mem also to -partition auto, -model also to gen (its Spec.Layers), and -cost also to the families whose order it shapes (%s; ppgen sim -cost or -model simulates any schedule)", strings.Join(costFamilies(), ", "))
	}
	if err := r.checkPartition(); err != nil {
		return opt, err
	}
	p, err := r.Pricing()
	if err != nil {
		return opt, err
	}
	if err := r.markedLayers(&opt.Passes); err != nil {
		return opt, err
	}
	if r.Model != "" {
		// Every candidate (auto, -compare) runs the model's layers, split
		// into its own stages.
		opt.StageCost = p.Stages
		if r.Schedule == auto.Name {
			sp, err := r.SplitModel()
			if err != nil {
				return opt, err
			}
			opt.Split = sp
		}
	}
	if r.Cost != "" || r.Model != "" {
		// The transfers laid out for the cost the program is simulated
		// by (the model's even split; Lower lays a -partition auto
		// split out again).
		opt.CommCost = p.Comm
	}
	if !(r.Mem >= 0 && r.Mem <= sim.MaxCost) { // NaN fails both
		return opt, usagef("-mem = %g; want 0 (no limit) or a finite limit up to %g", r.Mem, float64(sim.MaxCost))
	}
	switch {
	case r.Budget < 0 || r.Budget > auto.MaxBudget:
		return opt, usagef("-budget = %d; want 0 (the default, %d simulations per local search) or 1 to %d", r.Budget, auto.RepairBudget, auto.MaxBudget)
	case r.Budget != 0 && (r.Schedule != auto.Name || r.Model == ""):
		return opt, usagef("-budget %d bounds the local search of the orders -schedule auto synthesizes for a -model; give both (or drop -budget)", r.Budget)
	}
	opt.Budget = r.Budget
	if r.Schedule == auto.Name {
		opt.MemLimit = r.Mem
		opt.Progress = r.AutoProgress
		if opt.Cost, err = p.AutoCost(); err != nil {
			return opt, usageOf(err)
		}
	}
	// The options that rewrite a compute order are passes: they apply to
	// a family's order and to an -in file alike.
	opt.Passes.Split, opt.Passes.Overlap, opt.Passes.DxDwInOverlap = r.Split, r.Overlap, r.DxDwInOverlap
	if r.CommOrder == "" {
		return opt, nil // the passes' default order
	}
	order, err := passes.ParseCommOrder(r.CommOrder)
	if err != nil {
		return opt, &UsageError{err.Error()}
	}
	opt.Passes.Comm.Order = order
	return opt, nil
}

// Lower builds and lowers the schedule the flags name (with -schedule
// auto, the search's choice: auto.Lower), or reads the -in file (relative
// to Env.Dir) and lowers that, with the lowering options of the flags.
func (r *Request) Lower() (auto.Result, error) {
	opt, err := r.LowerOptions()
	if err != nil {
		return auto.Result{}, err
	}
	if r.In != "" {
		if r.Schedule != "" {
			return auto.Result{}, usagef("give either -in or -schedule, not both")
		}
		p, err := ReadProgram(resolve(r.Env.Dir, r.In))
		if err != nil {
			return auto.Result{}, err
		}
		if err := r.inFlags(p); err != nil {
			return auto.Result{}, err
		}
		res, err := gen.LowerProgram(p, opt.Options)
		if err != nil {
			return auto.Result{Result: res}, fmt.Errorf("%s: %w", r.In, err)
		}
		err = r.splitResult(&res)
		return auto.Result{Result: res}, err
	}
	cfg, err := r.Config()
	if err != nil {
		return auto.Result{}, err
	}
	if r.Schedule == auto.Name {
		res, err := auto.Lower(cfg, opt)
		if err != nil {
			return res, err
		}
		err = r.splitResult(&res.Result)
		return res, err
	}
	if r.Partition == PartitionAuto {
		return r.lowerPartitioned(cfg, opt.Options)
	}
	res, err := r.lowerFamily(cfg, opt.Options)
	if err != nil {
		return auto.Result{Result: res}, err
	}
	err = r.splitResult(&res)
	return auto.Result{Result: res}, err
}

// lowerFamily lowers the family -schedule names, of size cfg, with opt.
func (r *Request) lowerFamily(cfg ir.Config, opt gen.Options) (gen.Result, error) {
	if fam, ok := r.resolveFamily(); ok {
		return gen.LowerFamily(fam, cfg, opt)
	}
	return gen.Lower(cfg, opt) // its error names the schedules there are
}

// defaultCommOrder is -comm-order's default.
const defaultCommOrder = "timed"

// inFlags refuses the flags that an -in file's program leaves nothing to
// do: -ranks, -micro, -virtual and -placement (the file gives them), and,
// when the file is already lowered (it has transfers), the options of the
// passes that rewrite a compute order. Taken silently they would be
// recorded in a generated header that does not do what it says.
func (r *Request) inFlags(p ir.Program) error {
	var set []string
	for _, f := range []struct {
		name string
		on   bool
	}{{"-ranks", r.Ranks != 0}, {"-micro", r.Micro != 0}, {"-virtual", r.Virtual != 0}, {"-placement", r.Placement != ""}} {
		if f.on {
			set = append(set, f.name)
		}
	}
	if len(set) > 0 {
		return usagef("%s: -in %s gives the ranks, stages and micro-batches itself; drop %s", strings.Join(set, ", "), r.In, strings.Join(set, ", "))
	}
	if !p.HasComm() {
		return nil
	}
	for _, f := range []struct {
		name string
		on   bool
	}{
		{"-forward-only", r.ForwardOnly}, {"-overlap", r.Overlap}, {"-dxdw-in-overlap", r.DxDwInOverlap},
		{"-split", r.Split}, {"-fsdp", r.FSDP != 0}, {"-fsdp-prefetch", r.FSDPPrefetch != 0},
		{"-swap", r.Swap != 0 || r.SwapAuto}, {"-ship-labels", r.ShipLabels}, {"-comm-order", r.CommOrder != "" && r.CommOrder != defaultCommOrder},
	} {
		if f.on {
			set = append(set, f.name)
		}
	}
	if len(set) > 0 {
		return usagef("%s: -in %s is already lowered (it has transfers), so it has no compute order for them to rewrite; give its compute order instead (ppgen show -compute-only, or export -compute-only) or drop them", strings.Join(set, ", "), r.In)
	}
	return nil
}

// ScheduleName names the schedule for titles: the family, or the base name
// of the -in file.
func (r *Request) ScheduleName() string {
	if r.Schedule != "" {
		return r.Schedule
	}
	return filepath.Base(r.In)
}

// resolve joins a relative path to dir; "-" (stdin) and absolute paths stay.
func resolve(dir, path string) string {
	if dir == "" || path == "-" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// swapFlag is -swap's value: a distance N, or auto (SwapAuto).
type swapFlag struct {
	n    *int
	auto *bool
}

func (f swapFlag) String() string {
	switch {
	case f.auto != nil && *f.auto:
		return "auto"
	case f.n == nil:
		return "0"
	}
	return strconv.Itoa(*f.n)
}

func (f swapFlag) Set(v string) error {
	if v == "auto" {
		*f.n, *f.auto = 0, true
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%q: want N, the least compute steps between a swapped chunk's forward and its backward (at least 2; 0: none), or auto (-schedule auto -mem X chooses N)", v)
	}
	*f.n, *f.auto = n, false
	return nil
}

// checkSwapAuto refuses -swap auto where no search chooses the distance:
// without -schedule auto or -mem, or with a -recompute policy given (a
// chunk either swaps or recomputes; -recompute none tries swap alone).
func (r *Request) checkSwapAuto() error {
	switch {
	case !r.SwapAuto:
		return nil
	case r.Schedule != auto.Name:
		name := r.Schedule
		if name == "" {
			name = "given by -in"
		}
		return usagef("-swap auto: only -schedule auto chooses the swap distance (the schedule is %s); give -swap N (ppgen sim -schedule %s -swap N shows its memory), or use -schedule auto -mem X -swap auto", name, cmp.Or(r.Schedule, "..."))
	case r.Mem == 0:
		return usagef("-swap auto needs -mem X: -schedule auto swaps only where the activation memory limit keeps a faster order out; give -mem, or drop -swap auto")
	case r.Passes["recompute"] != "" && r.Passes["recompute"] != "none":
		return usagef("-swap auto with -recompute %s: a chunk either swaps or recomputes, and -schedule auto -mem tries recompute policies itself beside the swap distances; drop -recompute (or give -recompute none to try swap alone)", r.Passes["recompute"])
	}
	return nil
}
