package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/gencmd"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// runTrace simulates a schedule and writes the Chrome trace-event JSON that
// Perfetto and chrome://tracing load (see sim.Trace).
func runTrace(args []string, stdout, stderr io.Writer) error {
	req, fs := newRequest("trace", gencmd.Flags{In: true, Cost: "cost model, e.g. F=1,B=2,W=1,comm=0 (see `ppgen sim -h`); one unit is one millisecond in the trace"})
	out := fs.String("o", "-", "output file (- for stdout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkOut(*out); err != nil {
		return err
	}
	pr := newProgress(stderr, "ppgen trace", 0)
	defer pr.Done()
	res, err := lower(req, pr)
	if err != nil {
		return err
	}
	cost, err := parseCostFlag(req.Cost, res.Program.Stages())
	if err != nil {
		return err
	}
	pr.Phase("simulating %d steps", res.Program.NumSteps())
	r, err := sim.Run(res.Program, cost)
	if err != nil {
		return err
	}
	pr.Phase("rendering")
	b, err := sim.Trace(r, res.Program, sim.TraceMeta{Schedule: req.ScheduleName(), Command: gencmd.Invocation("trace", fs), Cost: &cost})
	if err != nil {
		return err
	}
	pr.Done()
	return writeOutput(*out, b, stdout, stderr, fmt.Sprintf(" (%d ranks, %d steps, makespan %s; open it in ui.perfetto.dev or chrome://tracing)",
		res.Program.Placement.Ranks(), res.Program.NumSteps(), strconv.FormatFloat(r.Makespan, 'g', 6, 64)))
}

// parseCostFlag parses -cost for a program of the given number of stages
// (the default cost when spec is empty); errors are usage errors.
func parseCostFlag(spec string, stages int) (sim.Cost, error) {
	if spec == "" {
		return sim.DefaultCost(), nil
	}
	c, err := sim.ParseCost(spec, stages)
	if err != nil {
		return sim.Cost{}, &gencmd.UsageError{Msg: err.Error()}
	}
	return c, nil
}

// compareCost parses -cost for a comparison and scales the compute costs
// of one stage to 1/V of the given ones (transfers, data, FSDP, optimizer
// and swap costs are kept). Per-stage lists are refused: the schedules of a
// comparison have different numbers of stages.
func compareCost(spec string, virtual int) (sim.Cost, error) {
	c, err := parseCostFlag(spec, 0)
	if err != nil {
		return c, err
	}
	if c, err = c.Resolve(0); err != nil {
		return c, &gencmd.UsageError{Msg: err.Error()}
	}
	if c, err = gen.ShareCost(c, virtual); err != nil {
		return c, usagef("-cost: %v", err)
	}
	return c, nil
}

// writeSVG writes an SVG file atomically and says so on stderr.
func writeSVG(path string, b []byte, stderr io.Writer) error {
	if err := writeFileAtomic(path, b); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "ppgen: wrote %s\n", path)
	return nil
}

// compareEntry is one schedule of `ppgen sim -compare`: a family and the
// number of stages per rank (0: the family's default).
type compareEntry struct {
	name    string
	virtual int
}

// parseCompare parses the -compare list "1f1b,interleaved:4,zbv": family
// names, each optionally with ":V".
func parseCompare(list string) ([]compareEntry, error) {
	var out []compareEntry
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		e := compareEntry{name: f}
		if name, v, ok := strings.Cut(f, ":"); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, usagef("-compare: %q: want NAME or NAME:V with V ≥ 1", f)
			}
			e = compareEntry{name: name, virtual: n}
		}
		if _, err := schedules.Lookup(e.name); err != nil {
			return nil, usagef("-compare: %v", err)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, usagef("-compare needs a comma-separated list of schedules, e.g. 1f1b,interleaved,zbv")
	}
	return out, nil
}

// compareRow is one simulated schedule of a comparison.
type compareRow struct {
	Schedule string `json:"schedule"`
	Virtual  int    `json:"virtual"`
	Stages   int    `json:"stages"`
	// ActivationMemory is the peak number of live chunks of the busiest
	// rank divided by V: activation memory in units of one micro-batch of a
	// rank's share of the model, comparable across V.
	ActivationMemory float64 `json:"activation_memory"`
	sim.Summary
	result  sim.Result
	program ir.Program
}

// runCompare lowers and simulates every entry with the shared flags (ranks,
// micro, options) and the cost model (req.Cost), by the evaluation -schedule
// auto makes of each candidate (gen.Evaluate). -virtual and -placement do
// not apply: each family takes its default V unless the entry says NAME:V.
// The cost model describes one rank's share of the model, so a family with V
// stages per rank runs each stage at 1/V of its F, B, I and W (see
// compareCost): every schedule then does the same work and makespans
// compare.
func runCompare(entries []compareEntry, req *gencmd.Request, pr *progress) ([]compareRow, error) {
	cost, err := compareCost(req.Cost, 1)
	if err != nil {
		return nil, err
	}
	var rows []compareRow
	for _, e := range entries {
		pr.Phase("lowering and simulating %s", e.name)
		one := *req
		one.Schedule, one.Virtual = e.name, e.virtual
		cfg, err := one.Config()
		if err != nil {
			return nil, err
		}
		opt, err := one.LowerOptions()
		if err != nil {
			return nil, err
		}
		res, r, mem, err := gen.Evaluate(cfg, opt, cost)
		if err != nil {
			if errors.As(err, new(*schedules.ConstraintError)) || errors.As(err, new(*gen.ScheduleError)) {
				return nil, err // it names the schedule
			}
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
		rows = append(rows, compareRow{
			Schedule: e.name, Virtual: res.Config.Virtual, Stages: res.Program.Stages(),
			ActivationMemory: mem,
			Summary:          r.Summary(), result: r, program: res.Program,
		})
		pr.Step()
	}
	return rows, nil
}

// writeCompareTable prints the comparison: one row per schedule with its
// makespan, both bubbles, the peak number of live chunks (largest over
// ranks), the activation memory that makes (peak chunks / V) and the peak
// chunks per rank.
func writeCompareTable(w io.Writer, rows []compareRow, header string) error {
	nameW := len("SCHEDULE")
	for _, r := range rows {
		nameW = max(nameW, len(r.Schedule))
	}
	var b strings.Builder
	b.WriteString(header)
	b.WriteByte('\n')
	fmt.Fprintf(&b, "%-*s  %2s  %8s  %6s  %11s  %8s  %7s  %s\n", nameW, "SCHEDULE", "V", "MAKESPAN", "BUBBLE", "SPAN BUBBLE", "PEAK ACT", "ACT MEM", "PEAK ACT PER RANK")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-*s  %2d  %8s  %5.1f%%  %10.1f%%  %8d  %7s  %v\n", nameW, r.Schedule, r.Virtual,
			strconv.FormatFloat(r.Makespan, 'g', 6, 64), 100*r.Bubble, 100*r.BubbleSpan,
			r.result.Peak(), strconv.FormatFloat(r.ActivationMemory, 'g', 4, 64), r.PeakActivations)
	}
	b.WriteString("PEAK ACT: live chunks (stage, micro) on the busiest rank; ACT MEM: PEAK ACT / V, in micro-batches of a rank's share of the model\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCompareJSON prints the comparison as one indented JSON array.
func writeCompareJSON(w io.Writer, rows []compareRow) error {
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// comparePanels turns the rows into stacked SVG timelines.
func comparePanels(rows []compareRow, width int) []sim.SVGPanel {
	panels := make([]sim.SVGPanel, len(rows))
	for i, r := range rows {
		panels[i] = sim.SVGPanel{Result: r.result, Program: r.program, Meta: sim.SVGMeta{Schedule: r.Schedule, Width: width}}
	}
	return panels
}
