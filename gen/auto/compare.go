package auto

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/pricing"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// This file holds `ppgen sim -compare`: several families lowered and
// simulated side by side, each evaluated as the search evaluates a
// candidate (Evaluate).

// The most schedules one -compare takes, and the most chunks they may hold
// together: each is lowered, simulated and kept for the table and the SVG.
const (
	MaxCompare       = 32
	MaxCompareChunks = 4 * ir.MaxChunks
)

// CheckCompareSize bounds what -compare keeps in memory: at most MaxCompare
// schedules of at most MaxCompareChunks (stage, micro-batch) chunks
// together. Values out of range are left to each schedule's own check.
func CheckCompareSize(entries []CompareEntry, ranks, micro int) error {
	if len(entries) > MaxCompare {
		return fmt.Errorf("-compare lists %d schedules; at most %d", len(entries), MaxCompare)
	}
	if ranks < 1 || ranks > ir.MaxIndex+1 || micro < 1 || micro > ir.MaxIndex+1 {
		return nil
	}
	total := 0
	for _, e := range entries {
		v := e.Virtual
		if v == 0 {
			v = e.Family.DefaultVirtual
		}
		v = max(v, 1)
		if v > ir.MaxIndex+1 {
			return nil // the schedule's own check says why
		}
		total += ranks * v * micro
		if total > MaxCompareChunks {
			return fmt.Errorf("-compare: the schedules hold more than %d (stage, micro-batch) chunks together at -ranks %d -micro %d; compare fewer schedules or smaller ones", MaxCompareChunks, ranks, micro)
		}
	}
	return nil
}

// CompareEntry is one schedule of `ppgen sim -compare`: a family and the
// number of stages per rank (0: the family's default).
type CompareEntry struct {
	Family  schedules.Family
	Virtual int
}

// SkipError is an error of CompareOptions.Lower that leaves its entry out
// of the comparison with Reason (Compared.Skipped) instead of ending it.
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return e.Reason }

// ParseCompare parses the -compare list "1f1b,interleaved:4,zbv": family
// names or their aliases (schedules.Lookup; each entry holds the family),
// each optionally with ":V".
func ParseCompare(list string) ([]CompareEntry, error) {
	var out []CompareEntry
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name, v := f, 0
		if n, vs, ok := strings.Cut(f, ":"); ok {
			var err error
			v, err = strconv.Atoi(vs)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("-compare: %q: want NAME or NAME:V with V ≥ 1", f)
			}
			name = n
		}
		if name == Name {
			// auto picks one family; schedules.Lookup's list names it.
			return nil, fmt.Errorf("-compare: %q: auto cannot be one of the compared schedules; use -schedule auto (without -compare), which compares every family and picks one, or list families: %s", f, strings.Join(schedules.Names(), ","))
		}
		fam, err := schedules.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("-compare: unknown schedule %q; want families from %s, or PyTorch's names for them (see `ppgen list`)", name, strings.Join(schedules.Names(), ", "))
		}
		e := CompareEntry{Family: fam, Virtual: v}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-compare needs a comma-separated list of schedules, e.g. 1f1b,interleaved,zbv")
	}
	return out, nil
}

// Compared is one simulated schedule of a comparison.
type Compared struct {
	Schedule string `json:"schedule"`
	Virtual  int    `json:"virtual"`
	Stages   int    `json:"stages"`
	// ActivationMemory is the peak number of live chunks of the busiest
	// rank divided by V: activation memory in units of one micro-batch of a
	// rank's share of the model, comparable across V.
	ActivationMemory float64 `json:"activation_memory"`
	// Recompute is the -recompute policy chosen for the entry with its
	// split under -mem (CompareOptions.Lower); "" when none was.
	Recompute string `json:"recompute,omitempty"`
	// Skipped, when not "", says why the entry has no result: no split of
	// the model fits -mem (a SkipError of CompareOptions.Lower). The other
	// fields but Schedule and Virtual are then zero.
	Skipped string `json:"skipped,omitempty"`
	sim.Summary
	Result  sim.Result `json:"-"`
	Program ir.Program `json:"-"`
}

// CompareOptions is what Compare takes of a command line besides its
// entries.
type CompareOptions struct {
	// Setup gives an entry's config and options: the command line's
	// shared flags (ranks, micro, lowering options) with the entry's
	// family and V.
	Setup func(e CompareEntry) (ir.Config, Options, error)
	// Pricing is the command line's cost model.
	Pricing *pricing.Pricing
	// Lower, when set (-partition auto), lowers an entry in Evaluate's
	// place: the family with its own split of the model's layers
	// (Result.Layers) and, under -mem without -recompute, the recompute
	// policy chosen with it (Result.Recompute), as the same command with
	// -schedule FAMILY does; the result is then simulated with that split.
	// A *SkipError it returns makes the entry a row that says why
	// (Compared.Skipped) rather than ending the comparison.
	Lower func(e CompareEntry, cfg ir.Config, opt Options) (Result, error)
	// Progress, when set, is called before each entry with its family's
	// name and the entries done.
	Progress func(name string, done int)
}

// Compare lowers and simulates every entry, by the evaluation -schedule
// auto makes of each candidate (Evaluate). -virtual and -placement do not
// apply: each family takes its default V unless the entry says NAME:V.
// Without a model, the cost model describes one rank's share of the model,
// so a family with V stages per rank runs each stage at 1/V of its F, B, I
// and W (pricing.Pricing.Share): every schedule then does the same work
// and makespans compare. With a model, each splits the model's layers into
// its stages, evenly, or with Lower by gen/partition for its order.
func Compare(entries []CompareEntry, opt CompareOptions) ([]Compared, error) {
	cost, err := opt.Pricing.Share(1)
	if err != nil {
		return nil, err
	}
	_, withModel := opt.Pricing.Model()
	var rows []Compared
	for _, e := range entries {
		name := e.Family.Name
		if opt.Progress != nil {
			opt.Progress(name, len(rows))
		}
		cfg, lo, err := opt.Setup(e)
		if err != nil {
			return nil, err
		}
		if cfg.Cost != nil && !withModel {
			// Built for what it is simulated by: each of its V stages
			// per rank at 1/V of the share.
			v := cfg.Virtual
			if v == 0 {
				v = e.Family.DefaultVirtual
			}
			if cfg.Cost, err = opt.Pricing.ShareOrder(v); err != nil {
				return nil, err
			}
		}
		var (
			res    gen.Result
			sr     sim.Result
			mem    float64
			policy string
		)
		if opt.Lower == nil {
			res, sr, mem, err = Evaluate(cfg, lo, cost)
		} else {
			// The family's own partition of the model's layers (-partition
			// auto), simulated as Evaluate does.
			var ar Result
			ar, err = opt.Lower(e, cfg, lo)
			res, policy = ar.Result, ar.Recompute
			if skip := (*SkipError)(nil); errors.As(err, &skip) {
				v := cfg.Virtual
				if v == 0 {
					v = max(e.Family.DefaultVirtual, 1)
				}
				rows = append(rows, Compared{Schedule: name, Virtual: v, Skipped: skip.Reason})
				continue
			}
			var c sim.Cost
			if err == nil {
				c, err = opt.Pricing.Program(res.Program, res.Layers, 0)
			}
			if err == nil {
				sr, err = sim.Run(res.Program, c)
				mem = float64(sr.Peak()) / float64(res.StagesPerShare())
			}
		}
		if err != nil {
			if errors.As(err, new(*schedules.ConstraintError)) || errors.As(err, new(*gen.ScheduleError)) {
				return nil, err // it names the schedule
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, Compared{
			Schedule: name, Virtual: res.Config.Virtual, Stages: res.Program.Stages(),
			ActivationMemory: mem, Recompute: policy,
			Summary: sr.Summary(), Result: sr, Program: res.Program,
		})
	}
	return rows, nil
}
