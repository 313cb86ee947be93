package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/gencmd"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/templates"
)

// runReport writes a self-contained HTML page about one schedule: what it
// is, that it verified, its simulated makespan and bubbles, a per-rank
// table, the SVG timeline and the lowered program.
func runReport(args []string, stdout, stderr io.Writer) error {
	req, fs := newRequest("report", gencmd.Flags{In: true, Cost: "cost model to simulate, e.g. F=1,B=2,W=1,comm=0 (see `ppgen sim -h`)"})
	out := fs.String("o", "", "the HTML file to write (- for stdout)")
	svgWidth := fs.Int("svg-width", 1200, "width of the timeline in pixels")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("missing -o FILE.html (- for stdout)")
	}
	if err := checkSVGWidth(*svgWidth); err != nil {
		return err
	}
	if err := checkOutput(req.Inputs(), namedFile{Name: "-o", Path: *out}, formatHTML); err != nil {
		return err
	}
	pr := newProgress(stderr, "ppgen report", 0)
	defer pr.Done()
	res, cost, r, name, err := lowerAndSimulate(req, pr)
	if err != nil {
		return err
	}
	p := res.Program
	rep := templates.Report{
		Title:       fmt.Sprintf("%s, P=%d, M=%d", name, p.Placement.Ranks(), p.Micro),
		Command:     commandLine(fs),
		Schedule:    name,
		Ranks:       p.Placement.Ranks(),
		Stages:      p.Stages(),
		Virtual:     p.Placement.Virtual(),
		Micro:       p.Micro,
		Placement:   p.Placement.String(),
		Passes:      strings.Join(res.Info.Passes, ", "),
		Fingerprint: emit.Fingerprint(p),
		Steps:       res.Report.Steps,
		Transfers:   res.Report.Transfers,
		Cost:        cost.String(),
		Makespan:    strconv.FormatFloat(r.Makespan, 'g', 6, 64),
		Bubble:      fmt.Sprintf("%.1f%%", 100*r.Bubble),
		BubbleSpan:  fmt.Sprintf("%.1f%%", 100*r.BubbleSpan),
		HasFSDP:     res.Report.PeakUnsharded != nil,
		SVG:         string(sim.SVG(r, p, sim.SVGMeta{Schedule: name, Width: *svgWidth})),
		Program:     ir.FormatText(p),
	}
	for rank := range rep.Ranks {
		row := templates.ReportRow{Rank: rank, Steps: len(p.Ranks[rank]), Busy: strconv.FormatFloat(r.Busy[rank], 'g', 6, 64)}
		var stages []string
		for _, s := range p.Placement.StagesOf(rank) {
			stages = append(stages, strconv.Itoa(s))
		}
		row.Stages = strings.Join(stages, ", ")
		if r.Makespan > 0 {
			row.Idle = fmt.Sprintf("%.1f%%", 100*(1-r.Busy[rank]/r.Makespan))
		}
		if rank < len(res.Report.PeakActivations) {
			row.PeakActivations = res.Report.PeakActivations[rank]
		}
		if rank < len(res.Report.Slots) {
			row.Slots = res.Report.Slots[rank]
		}
		if rank < len(res.Report.PeakUnsharded) {
			row.PeakUnsharded = res.Report.PeakUnsharded[rank]
		}
		rep.Rows = append(rep.Rows, row)
	}
	pr.Phase("rendering")
	b, err := templates.RenderReport(rep)
	pr.Done()
	if err != nil {
		return err
	}
	return writeOutput(*out, b, stdout, stderr, "")
}
