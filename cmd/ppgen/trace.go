package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/gencmd"
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
	if err := checkOutput(req.Inputs(), namedFile{Name: "-o", Path: *out}, formatChromeTrace); err != nil {
		return err
	}
	pr := newProgress(stderr, "ppgen trace", 0)
	defer pr.Done()
	res, cost, r, _, err := lowerAndSimulate(req, pr)
	if err != nil {
		return err
	}
	pr.Phase("rendering")
	name, _ := simulated(req, res) // for -schedule auto, the family it chose
	b, err := sim.Trace(r, res.Program, sim.TraceMeta{Schedule: name, Command: commandLine(fs), Cost: &cost})
	if err != nil {
		return err
	}
	pr.Done()
	if err := writeOutput(*out, b, stdout, stderr, fmt.Sprintf(" (%d ranks, %d steps, makespan %s; open it in ui.perfetto.dev or chrome://tracing)",
		res.Program.Placement.Ranks(), res.Program.NumSteps(), strconv.FormatFloat(r.Makespan, 'g', 6, 64))); err != nil {
		return err
	}
	noteAuto(stderr, res, req.Mem)
	return nil
}

// writeSVG writes an SVG file atomically and says so on stderr.
func writeSVG(path string, b []byte, stderr io.Writer) error {
	if err := writeFileAtomic(path, b); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "ppgen: wrote %s\n", path)
	return nil
}

// writeCompareTable prints the comparison: one row per schedule with its
// makespan, both bubbles, the peak number of live chunks (largest over
// ranks), the activation memory that makes (peak chunks / V) and the peak
// chunks per rank; then the -recompute policy chosen for each row that has
// one (-partition auto under -mem mem), or why a row was skipped (no
// split fits -mem).
func writeCompareTable(w io.Writer, rows []auto.Compared, header string, mem float64) error {
	nameW := len("SCHEDULE")
	for _, r := range rows {
		nameW = max(nameW, len(r.Schedule))
	}
	var b strings.Builder
	b.WriteString(header)
	b.WriteByte('\n')
	fmt.Fprintf(&b, "%-*s  %2s  %8s  %6s  %11s  %8s  %7s  %s\n", nameW, "SCHEDULE", "V", "MAKESPAN", "BUBBLE", "SPAN BUBBLE", "PEAK ACT", "ACT MEM", "PEAK ACT PER RANK")
	for _, r := range rows {
		if r.Skipped != "" {
			fmt.Fprintf(&b, "%-*s  %2d  %8s\n", nameW, r.Schedule, r.Virtual, "—")
			continue
		}
		fmt.Fprintf(&b, "%-*s  %2d  %8s  %5.1f%%  %10.1f%%  %8d  %7s  %v\n", nameW, r.Schedule, r.Virtual,
			strconv.FormatFloat(r.Makespan, 'g', 6, 64), 100*r.Bubble, 100*r.BubbleSpan,
			r.Result.Peak(), strconv.FormatFloat(r.ActivationMemory, 'g', 4, 64), r.PeakActivations)
	}
	b.WriteString("PEAK ACT: live chunks (stage, micro) on the busiest rank; ACT MEM: PEAK ACT / V, in micro-batches of a rank's share of the model\n")
	for _, r := range rows {
		switch {
		case r.Skipped != "":
			fmt.Fprintf(&b, "%s: skipped: %s\n", r.Schedule, r.Skipped)
		case r.Recompute != "":
			fmt.Fprintf(&b, "%s: %s\n", r.Schedule, recomputeChoice(r.Recompute, mem))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCompareJSON prints the comparison as one indented JSON array.
func writeCompareJSON(w io.Writer, rows []auto.Compared) error {
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// comparePanels turns the rows into stacked SVG timelines.
func comparePanels(rows []auto.Compared, width int) []sim.SVGPanel {
	var panels []sim.SVGPanel
	for _, r := range rows {
		if r.Skipped == "" { // no timeline to draw
			panels = append(panels, sim.SVGPanel{Result: r.Result, Program: r.Program, Meta: sim.SVGMeta{Schedule: r.Schedule, Width: width}})
		}
	}
	return panels
}
