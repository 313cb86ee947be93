package gencmd

import (
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/synth"
	"github.com/ppgen/ppgen/internal/long"
)

var table = flag.Bool("table", false, "print BENCHMARKS.md's table of auto against the fixed families (even and partitioned splits) on the three example models at P = 4, 8, 16")

// tableRow is one row of the table: the best fixed family with the even
// split and with gen/partition's split, each lowered and simulated, auto's
// choice, and the lower bound of auto's stages.
type tableRow struct {
	even, part, auto auto.Candidate
	bound            float64
}

// evalCandidate is the makespan of a family lowered and simulated with its
// candidate's split, and its memory.
func evalCandidate(t *testing.T, r *Request, sp *auto.SplitModel, c auto.Candidate) (float64, float64) {
	one := *r
	one.Schedule, one.Virtual, one.Partition, one.Mem, one.Budget = c.Config.Schedule, c.Config.Virtual, PartitionEven, 0, 0
	opt, err := one.LowerOptions()
	if err != nil {
		t.Fatal(err)
	}
	_, sr, mem, err := auto.EvaluateSplit(c.Config, opt.Options, sp, model.Partition{Bounds: c.Layers})
	if err != nil {
		t.Fatalf("%s V=%d: %v", c.Config.Schedule, c.Config.Virtual, err)
	}
	return sr.Makespan, mem
}

// runRow runs auto with -partition auto on the model at path, P, M within
// limit, with -budget budget, and checks the row: auto's memory within the
// limit, the bounds of the candidates it did not lower at most their
// lowered makespans, the figures of those it did as lowered again, auto
// no slower than any family within the limit, and the lower bound of its
// stages at most its makespan.
func runRow(t *testing.T, path string, P, M int, limit float64, budget int) tableRow {
	r := &Request{Schedule: auto.Name, Ranks: P, Micro: M, Model: path, Partition: PartitionAuto, Mem: limit, Budget: budget, simCost: true} // as sim binds it
	res, err := r.Lower()
	if err != nil && strings.Contains(err.Error(), "no schedule fits") {
		t.Logf("%s P=%d M=%d mem %g: %v", path, P, M, limit, err)
		return tableRow{auto: auto.Candidate{Makespan: math.Inf(1)}, even: auto.Candidate{Makespan: math.Inf(1)}, part: auto.Candidate{Makespan: math.Inf(1)}}
	}
	if err != nil {
		t.Fatalf("%s P=%d M=%d mem %g: %v", path, P, M, limit, err)
	}
	price, err := r.Pricing()
	if err != nil {
		t.Fatal(err)
	}
	cost, err := price.Program(res.Program, res.Layers, 0)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := sim.Run(res.Program, cost)
	if err != nil {
		t.Fatal(err)
	}
	row := tableRow{auto: auto.Candidate{Config: res.Config, Makespan: sr.Makespan, Layers: res.Layers, Recompute: res.Recompute}}
	// Partitioned when its split is not the even one (a partitioned
	// candidate that found the even split runs the same program).
	m, err := r.ReadModel()
	if err != nil {
		t.Fatal(err)
	}
	even, err := model.Even(len(m.Layers), len(res.Layers)-1)
	if err != nil {
		t.Fatal(err)
	}
	row.auto.Partitioned = fmt.Sprint(even.Bounds) != fmt.Sprint(res.Layers)
	capped, err := r.MemoryCap(res.Result)
	if err != nil {
		t.Fatal(err)
	}
	if row.bound, _, err = synth.LowerBound(res.Program, cost, capped, sr.Makespan); err != nil {
		t.Fatal(err)
	}
	sp, err := r.SplitModel()
	if err != nil {
		t.Fatal(err)
	}
	// auto's choice, synthesized or not, within the limit: its memory
	// measured again from the lowered program's simulation.
	perRank, err := partition.Memory(m, model.Partition{Bounds: res.Layers}, res.Program, sr)
	if err != nil {
		t.Fatal(err)
	}
	if mem := slices.Max(perRank); mem > limit*(1+1e-9) {
		t.Errorf("%s P=%d M=%d: auto's %s V=%d holds %g, over the limit %g", path, P, M, res.Config.Schedule, res.Config.Virtual, mem, limit)
	}
	row.auto.Synthesized = auto.IsSynthesized(res.Config.Schedule)
	row.even.Makespan, row.part.Makespan = math.Inf(1), math.Inf(1)
	for _, c := range res.Candidates {
		if c.Layers == nil || (c.Skipped != "" && c.Skipped != auto.NotLowered) || c.Synthesized || c.Recompute != "" {
			// a synthesized order has no family to rebuild it by its
			// config; the family columns are without recompute
			continue
		}
		ms, mem := evalCandidate(t, r, sp, c)
		if c.Skipped == auto.NotLowered && c.Makespan > ms*(1+1e-9) {
			t.Errorf("%s P=%d M=%d: %s V=%d (partitioned %v): the bound auto pruned by, %g, is over the lowered makespan %g", path, P, M, c.Config.Schedule, c.Config.Virtual, c.Partitioned, c.Makespan, ms)
		}
		if c.Skipped == "" && (!nearly(c.Makespan, ms) || !nearly(c.ActMem, mem)) {
			t.Errorf("%s P=%d M=%d: %s V=%d (partitioned %v): reported %g, mem %g; lowered %g, mem %g", path, P, M, c.Config.Schedule, c.Config.Virtual, c.Partitioned, c.Makespan, c.ActMem, ms, mem)
		}
		if mem > limit*(1+1e-9) {
			continue
		}
		c.Makespan, c.ActMem = ms, mem
		best := &row.even
		if c.Partitioned {
			best = &row.part
		}
		if ms < best.Makespan {
			*best = c
		}
	}
	for _, c := range []auto.Candidate{row.even, row.part} {
		if row.auto.Makespan > c.Makespan*(1+1e-9) {
			t.Errorf("%s P=%d M=%d mem %g: auto %s V=%d %g is slower than %s V=%d (partitioned %v) %g",
				path, P, M, limit, row.auto.Config.Schedule, row.auto.Config.Virtual, row.auto.Makespan, c.Config.Schedule, c.Config.Virtual, c.Partitioned, c.Makespan)
		}
	}
	if row.bound > row.auto.Makespan*(1+1e-9) {
		t.Errorf("%s P=%d M=%d: lower bound %g over auto's makespan %g", path, P, M, row.bound, row.auto.Makespan)
	}
	return row
}

// tableModels are the example models of BENCHMARKS.md's table.
var tableModels = []struct{ name, file string }{
	{"uniform", "uniform.json"}, {"uniform, W = 0.6·I", "uniform_w06.json"}, {"LLM-like", "llm.json"},
}

// A tableCase is one row TestAutoWithPartition runs: a model of
// tableModels, P, M, the memory limit in micro-batches of a rank's share
// (k), and auto's -budget (0: its default search).
type tableCase struct {
	name, file string
	P, M       int
	k          float64
	budget     int
}

// tableCases returns the rows TestAutoWithPartition runs, and whether it
// checks the targets on them (checkFasterThanEven on the LLM-like
// rows, checkNearBound at M = 4P). With -table: BENCHMARKS.md's table, the
// three models at P = 4, 8, 16, M = 2P and 4P, within P and P/2
// micro-batches, targets checked. In the long suite (PPGEN_LONG=1): its
// LLM-like rows at P = 4, targets checked. Otherwise three small rows at
// P = 2, M = 4 with -budget 1, where the even split of every family is
// over the limit on one of them: runRow's checks only (auto no slower than
// any family within the limit, its memory within it, the pruning bounds
// and the reported figures, the lower bound below auto).
func tableCases() ([]tableCase, bool) {
	sweep := func(models []struct{ name, file string }, ranks []int) []tableCase {
		var cases []tableCase
		for _, md := range models {
			for _, P := range ranks {
				for _, M := range []int{2 * P, 4 * P} {
					for _, k := range []float64{float64(P), float64(P) / 2} {
						cases = append(cases, tableCase{md.name, md.file, P, M, k, 0})
					}
				}
			}
		}
		return cases
	}
	switch {
	case *table:
		return sweep(tableModels, []int{4, 8, 16}), true
	case long.Enabled():
		return sweep(tableModels[2:], []int{4}), true
	}
	return []tableCase{
		{"LLM-like", "llm.json", 2, 4, 2, 1},
		{"LLM-like", "llm.json", 2, 4, 1.5, 1}, // no family fits with the even split
		{"uniform, W = 0.6·I", "uniform_w06.json", 2, 4, 2, 1},
	}, false
}

// TestAutoWithPartition: auto with -partition auto is never worse than any
// family with the even split or with its partition (each lowered and
// simulated, memory within the limit), and its lower bound is below it;
// on the rows of tableCases that check the targets, at M = 4P it
// is within maxGap of that bound, and on the LLM-like model it is at
// least minSpeedup times as fast as the best family with the even split.
// With -table, it prints the whole of BENCHMARKS.md's table.
func TestAutoWithPartition(t *testing.T) {
	cases, targets := tableCases()
	var out strings.Builder
	out.WriteString("| model | P | M | mem limit | best family, even split | best family, ppgen's partition | auto | lower bound | auto's gap |\n")
	out.WriteString("|---|---:|---:|---:|---|---|---|---:|---:|\n")
	for _, tc := range cases {
		path := filepath.Join("..", "..", "examples", "models", tc.file)
		m, err := (&Request{Model: path}).ReadModel()
		if err != nil {
			t.Fatal(err)
		}
		act := 0.0
		for _, l := range m.Layers {
			act += l.Act
		}
		P, M, k := tc.P, tc.M, tc.k
		limit := k * act / float64(P) // k micro-batches of a rank's share
		var row tableRow
		ran := false
		t.Run(fmt.Sprintf("%s/P=%d/M=%d/mem=%g", tc.file, P, M, limit), func(t *testing.T) {
			ran = true
			row = runRow(t, path, P, M, limit, tc.budget)
			if targets && tc.file == "llm.json" {
				checkFasterThanEven(t, row, P, M, limit)
			}
			if targets && M == 4*P {
				checkNearBound(t, row, fmt.Sprintf("%s P=%d M=%d mem %g", tc.name, P, M, limit))
			}
		})
		if !ran {
			continue // not selected by -run
		}
		name := func(c auto.Candidate) string {
			if math.IsInf(c.Makespan, 1) {
				return "none fits"
			}
			return fmt.Sprintf("%s V=%d: %.4g", c.Config.Schedule, c.Config.Virtual, c.Makespan)
		}
		split := "even"
		if row.auto.Partitioned {
			split = "partition"
		}
		if row.auto.Recompute != "" {
			split += ", -recompute " + row.auto.Recompute
		}
		if math.IsInf(row.auto.Makespan, 1) {
			fmt.Fprintf(&out, "| %s | %d | %d | %g (%g mb) | none fits | none fits | none fits | | |\n", tc.name, P, M, limit, k)
			continue
		}
		fmt.Fprintf(&out, "| %s | %d | %d | %g (%g mb) | %s | %s | %s V=%d %s: **%.4g** | %.4g | %.1f %% |\n",
			tc.name, P, M, limit, k, name(row.even), name(row.part), row.auto.Config.Schedule, row.auto.Config.Virtual, split, row.auto.Makespan,
			row.bound, max(0, 100*(row.auto.Makespan/row.bound-1))) // the bound may exceed by rounding only (asserted above)
	}
	t.Log("\n" + out.String())
	if *table {
		fmt.Print(out.String())
	}
}

// minSpeedup is the issue's "at least 15 % faster than the best evenly
// split family" on the LLM-like rows: the even split's makespan over
// auto's (a speed ratio; auto's time is at most 1/1.15 = 87 % of it).
const minSpeedup = 1.15

// checkFasterThanEven fails when auto is less than minSpeedup times as fast
// as the best family with the even split within the limit (a row where no
// family fits with the even split has nothing to beat).
func checkFasterThanEven(t *testing.T, row tableRow, P, M int, limit float64) {
	t.Helper()
	if math.IsInf(row.even.Makespan, 1) || math.IsInf(row.auto.Makespan, 1) {
		return
	}
	if sp := row.even.Makespan / row.auto.Makespan; sp < minSpeedup {
		t.Errorf("LLM-like P=%d M=%d mem %g: auto %s V=%d %g is %.3f× as fast as %s V=%d (even split) %g, want at least %g×",
			P, M, limit, row.auto.Config.Schedule, row.auto.Config.Virtual, row.auto.Makespan, sp,
			row.even.Config.Schedule, row.even.Config.Virtual, row.even.Makespan, minSpeedup)
	}
}

func nearly(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

// maxGap is the "within 5 % of its lower bound at M = 4P".
const maxGap = 0.05

// checkNearBound fails when auto's makespan is more than maxGap over the
// lower bound of its stages.
func checkNearBound(t *testing.T, row tableRow, what string) {
	t.Helper()
	if gap := row.auto.Makespan/row.bound - 1; gap > maxGap {
		t.Errorf("%s: auto %s V=%d: %g, %.1f %% over the bound %g", what, row.auto.Config.Schedule, row.auto.Config.Virtual, row.auto.Makespan, 100*gap, row.bound)
	}
}

// TestAutoNearItsBound (long suite): on two rows of BENCHMARKS.md's table
// at M = 4P outside the LLM-like P = 4 rows TestAutoWithPartition runs in
// the long suite, auto is within 5 % of the lower bound of its stages (the
// issue's target; runRow also checks it against every family): the
// LLM-like model at P = 8, M = 32 within four micro-batches of a rank's
// share (18.5), and W = 0.6·I at P = 4, M = 16 within two (16), the row
// that needs the reinsertion (380.6 without it, 5.2 % over).
func TestAutoNearItsBound(t *testing.T) {
	long.Skip(t, "two rows of BENCHMARKS.md's table at auto's default search")
	for _, tc := range []struct {
		model string
		P, M  int
		limit float64
	}{
		{"llm.json", 8, 32, 18.5},
		{"uniform_w06.json", 4, 16, 16},
	} {
		t.Run(fmt.Sprintf("%s/P=%d/M=%d/mem=%g", tc.model, tc.P, tc.M, tc.limit), func(t *testing.T) {
			row := runRow(t, filepath.Join("..", "..", "examples", "models", tc.model), tc.P, tc.M, tc.limit, 0)
			checkNearBound(t, row, fmt.Sprintf("%s P=%d M=%d mem %g", tc.model, tc.P, tc.M, tc.limit))
		})
	}
}
