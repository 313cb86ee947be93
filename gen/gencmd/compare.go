package gencmd

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// This file holds the cost flags and `ppgen sim -compare`: several families
// lowered and simulated side by side, each evaluated as -schedule auto
// evaluates a candidate (gen.Evaluate).

// ParseCost parses -cost for a program of the given number of stages
// (the default cost when spec is empty); errors are usage errors.
func ParseCost(spec string, stages int) (sim.Cost, error) {
	if spec == "" {
		return sim.DefaultCost(), nil
	}
	c, err := sim.ParseCost(spec, stages)
	if err != nil {
		return sim.Cost{}, &UsageError{Msg: err.Error()}
	}
	return c, nil
}

// CompareCost parses -cost for a comparison and scales the compute costs
// of one stage to 1/V of the given ones (transfers, data, FSDP, optimizer
// and swap costs are kept). Per-stage lists are refused: the schedules of a
// comparison have different numbers of stages.
func CompareCost(spec string, virtual int) (sim.Cost, error) {
	c, err := ParseCost(spec, 0)
	if err != nil {
		return c, err
	}
	if c, err = c.Resolve(0); err != nil {
		return c, &UsageError{Msg: err.Error()}
	}
	if c, err = gen.ShareCost(c, virtual); err != nil {
		return c, usagef("-cost: %v", err)
	}
	return c, nil
}

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
		return usagef("-compare lists %d schedules; at most %d", len(entries), MaxCompare)
	}
	if ranks < 1 || ranks > ir.MaxIndex+1 || micro < 1 || micro > ir.MaxIndex+1 {
		return nil
	}
	total := 0
	for _, e := range entries {
		v := e.Virtual
		if v == 0 {
			if fam, err := schedules.Lookup(e.Name); err == nil {
				v = fam.DefaultVirtual
			}
		}
		v = max(v, 1)
		if v > ir.MaxIndex+1 {
			return nil // the schedule's own check says why
		}
		total += ranks * v * micro
		if total > MaxCompareChunks {
			return usagef("-compare: the schedules hold more than %d (stage, micro-batch) chunks together at -ranks %d -micro %d; compare fewer schedules or smaller ones", MaxCompareChunks, ranks, micro)
		}
	}
	return nil
}

// CompareEntry is one schedule of `ppgen sim -compare`: a family and the
// number of stages per rank (0: the family's default).
type CompareEntry struct {
	Name    string
	Virtual int
}

// ParseCompare parses the -compare list "1f1b,interleaved:4,zbv": family
// names or their aliases (schedules.Canonical; each entry holds the family's
// name), each optionally with ":V".
func ParseCompare(list string) ([]CompareEntry, error) {
	var out []CompareEntry
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		e := CompareEntry{Name: f}
		if name, v, ok := strings.Cut(f, ":"); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, usagef("-compare: %q: want NAME or NAME:V with V ≥ 1", f)
			}
			e = CompareEntry{Name: name, Virtual: n}
		}
		if e.Name == gen.Auto {
			// auto picks one family; schedules.Lookup's list names it.
			return nil, usagef("-compare: %q: auto cannot be one of the compared schedules; use -schedule auto (without -compare), which compares every family and picks one, or list families: %s", f, strings.Join(schedules.Names(), ","))
		}
		canonical, ok := schedules.Canonical(e.Name)
		if !ok {
			return nil, usagef("-compare: unknown schedule %q; want families from %s, or PyTorch's names for them (see `ppgen list`)", e.Name, strings.Join(schedules.Names(), ", "))
		}
		e.Name = canonical
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, usagef("-compare needs a comma-separated list of schedules, e.g. 1f1b,interleaved,zbv")
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
	sim.Summary
	Result  sim.Result `json:"-"`
	Program ir.Program `json:"-"`
}

// Compare lowers and simulates every entry with the shared flags (ranks,
// micro, options) and the cost model (r.Cost), by the evaluation -schedule
// auto makes of each candidate (gen.Evaluate). -virtual and -placement do
// not apply: each family takes its default V unless the entry says NAME:V.
// The cost model describes one rank's share of the model, so a family with V
// stages per rank runs each stage at 1/V of its F, B, I and W (see
// CompareCost): every schedule then does the same work and makespans
// compare. With -model, each splits the model's layers into its stages,
// evenly, or with -partition auto by gen/partition for its order.
func (r *Request) Compare(entries []CompareEntry, progress func(name string, done int)) ([]Compared, error) {
	cost, err := CompareCost(r.Cost, 1)
	if err != nil {
		return nil, err
	}
	var rows []Compared
	for _, e := range entries {
		if progress != nil {
			progress(e.Name, len(rows))
		}
		one := *r
		one.Schedule, one.Virtual = e.Name, e.Virtual
		cfg, err := one.Config()
		if err != nil {
			return nil, err
		}
		if cfg.Cost != nil && r.Model == "" {
			// Built for what it is simulated by: each of its V stages
			// per rank at 1/V of the share.
			v := cfg.Virtual
			if f, err := schedules.Lookup(e.Name); err == nil && v == 0 {
				v = f.DefaultVirtual
			}
			share, err := gen.ShareCost(cost, max(v, 1))
			if err != nil {
				return nil, usagef("-cost: %v", err)
			}
			cfg.Cost = &ir.Costs{F: share.F, I: share.I, W: share.W, Comm: share.Comm}
		}
		opt, err := one.LowerOptions()
		if err != nil {
			return nil, err
		}
		res, sr, mem, err := gen.Evaluate(cfg, opt, cost)
		if err == nil && r.Partition == PartitionAuto {
			// The family's own partition of the model's layers (-partition
			// auto), simulated as Evaluate does.
			err = one.splitResult(&res)
			var c sim.Cost
			if err == nil {
				c, err = one.ResultCost(res)
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
			return nil, fmt.Errorf("%s: %w", e.Name, err)
		}
		rows = append(rows, Compared{
			Schedule: e.Name, Virtual: res.Config.Virtual, Stages: res.Program.Stages(),
			ActivationMemory: mem,
			Summary:          sr.Summary(), Result: sr, Program: res.Program,
		})
	}
	return rows, nil
}
