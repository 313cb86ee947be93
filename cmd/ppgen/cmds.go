package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/gencmd"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/synth"
)

func runList(args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return writeList(stdout, outputWidth(stdout))
}

// listRow is one schedule of `ppgen list`: its name, its V, and its
// paragraphs (summary, constraints, aliases).
type listRow struct {
	name, v string
	paras   []string
}

// writeList writes `ppgen list`'s table: NAME and V columns, then each
// schedule's summary, constraints and aliases as paragraphs of the last
// column, wrapped so that no line is longer than width columns (a word
// longer than the column overflows it).
func writeList(w io.Writer, width int) error {
	var rows []listRow
	for _, f := range schedules.All() {
		v := f.DefaultVirtual
		if v == 0 {
			v = 1
		}
		r := listRow{name: f.Name, v: fmt.Sprint(v), paras: []string{f.Summary, "constraints: " + f.Constraints}}
		if a := aliases(f); a != "" {
			r.paras = append(r.paras, "aliases: "+a)
		}
		rows = append(rows, r)
	}
	rows = append(rows, listRow{name: auto.Name, v: fmt.Sprintf("1-%d", auto.MaxVirtual), paras: []string{
		"the fastest family and V under the cost model whose activation memory fits -mem (simulated); with -model also orders synthesized for its stages",
		"constraints: any the families above take; -mem LIMIT, -cost MODEL"}})
	nameW, vW := len("NAME"), len("V")
	for _, r := range rows {
		nameW, vW = max(nameW, len(r.name)), max(vW, len(r.v))
	}
	indent := nameW + 2 + vW + 2
	const more = 2 // a paragraph's further lines are indented by this much
	textW := max(width-indent-more, 1)
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s  %-*s  %s\n", nameW, "NAME", vW, "V", "SUMMARY, CONSTRAINTS, ALIASES")
	for _, r := range rows {
		first := true
		for _, p := range r.paras {
			for i, line := range strings.Split(wrap(p, textW), "\n") {
				switch {
				case first:
					fmt.Fprintf(&b, "%-*s  %-*s  %s\n", nameW, r.name, vW, r.v, line)
					first = false
				case i == 0:
					fmt.Fprintf(&b, "%*s%s\n", indent, "", line)
				default:
					fmt.Fprintf(&b, "%*s%s\n", indent+more, "", line)
				}
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// aliases lists f's aliases as `ppgen list` shows them: each as torchtitan
// names it and as PyTorch's class ("Interleaved1F1B, ScheduleInterleaved1F1B"),
// or "" when it has none.
func aliases(f schedules.Family) string {
	var out []string
	for _, a := range f.Aliases {
		out = append(out, a, "Schedule"+a)
	}
	return strings.Join(out, ", ")
}

func runShow(args []string, stdout, stderr io.Writer) error {
	req, fs := newRequest("show", gencmd.Flags{In: true})
	computeOnly := fs.Bool("compute-only", false, "print only the compute steps (F, B, I, W, overlaps)")
	format := fs.String("format", "text", "output form: text or csv (PyTorch's pipelining CSV)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *format != "text" && *format != "csv" {
		return usagef("-format %q; want text or csv", *format)
	}
	var p ir.Program
	pr := newProgress(stderr, "ppgen show", 0)
	res, err := lower(req, pr)
	pr.Done()
	switch {
	case err == nil && *computeOnly:
		p = res.Compute
	case err == nil:
		p = res.Program
	case *computeOnly && req.In == "":
		// A family that cannot be lowered yet still shows its order.
		cfg, cerr := req.Config()
		if cerr != nil {
			return cerr
		}
		if _, p, cerr = gen.Build(cfg); cerr != nil {
			return err
		}
	default:
		return err
	}
	if *format == "csv" {
		_, err = stdout.Write(ir.FormatCSV(p))
	} else {
		_, err = io.WriteString(stdout, ir.FormatText(p))
	}
	noteAuto(stderr, res, req.Mem)
	return err
}

func runVerify(args []string, stdout, stderr io.Writer) error {
	req, fs := newRequest("verify", gencmd.Flags{In: true, MaxActivations: true})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkMaxActivations(req.MaxActivations); err != nil {
		return err
	}
	pr := newProgress(stderr, "ppgen verify", 0)
	res, err := lower(req, pr)
	pr.Done()
	if err != nil {
		return err // exitCode: 1 when the program is unsafe, else 2
	}
	fsdp := ""
	if res.Report.PeakUnsharded != nil {
		fsdp = fmt.Sprintf("; peak unsharded stages per rank %v", res.Report.PeakUnsharded)
	}
	transfers := fmt.Sprintf("%d transfers", res.Report.Transfers)
	if res.Report.Batches > 0 {
		b := passes.CountBatches(res.Program)
		transfers += fmt.Sprintf(", %d of them in %d batches", b.Batched, b.Batches)
	}
	ok := "ok"
	if res.Candidates != nil {
		ok = fmt.Sprintf("ok (auto chose %s V=%d%s)", res.Config.Schedule, res.Config.Virtual, autoExtra(res.Recompute, res.Swap))
	}
	kind := ""
	if res.Report.ForwardOnly {
		kind = "forward-only, "
	}
	fmt.Fprintf(stdout, "%s: %s%d ranks, %d stages, %d micro-batches, %d steps (%s); deadlock-free under rendezvous; peak activations per rank %v; slots per rank %v; mean receive lead %.2f compute steps%s\n",
		ok, kind, res.Program.Placement.Ranks(), res.Program.Stages(), res.Program.Micro, res.Report.Steps, transfers,
		peaks(res.Report.PeakActivations, res.Report.PeakLive), res.Info.Slots, res.Info.RecvDistance, fsdp)
	return nil
}

func runSim(args []string, stdout, stderr io.Writer) error {
	req, fs := newRequest("sim", gencmd.Flags{In: true, Cost: "cost model: comma-separated KEY=VALUE, keys F, B (the full backward), I, W, comm, data, overlap, unshard, reduce, opt, swap, act, bw, param, dp (param=SIZE with bw and dp=N charge each FSDP all-gather and reduce-scatter a ring over N ranks); per-stage lists F=1:1:1:1.4; keys not given keep their defaults F=1, B=2, W=1, I=B-W, the rest 0, and B=I+W (of B, I, W one not given is derived from the other two; all three given must agree); values finite in [0, 1e9], overlap in [0, 1]"})
	asJSON := fs.Bool("json", false, "print one JSON object (schedule, virtual, makespan, bubble, bubble_span, peak_activations, busy, lower_bound); an array with -compare")
	grid := fs.Bool("grid", false, "also print a text timeline, one row per rank")
	width := fs.Int("width", 120, "grid width in columns")
	svgOut := fs.String("svg", "", "write an SVG timeline to this file (stacked timelines with -compare)")
	svgWidth := fs.Int("svg-width", 1200, "SVG width in pixels")
	compare := fs.String("compare", "", "compare schedules: a comma-separated list of families, each NAME or NAME:V, at the same -ranks, -micro and -cost; a NAME may be PyTorch's or torchtitan's (ZBVZeroBubble, ScheduleInterleaved1F1B; see -schedule)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *svgOut == "-" {
		return usagef("-svg needs a file name")
	}
	set := setFlags(fs)
	switch {
	case set["width"] && !*grid:
		return usagef("-width %d applies to the -grid timeline only; add -grid, or drop -width (-svg-width sizes the SVG)", *width)
	case *grid && *asJSON:
		return usagef("-grid does not apply with -json: the JSON object has no text timeline; drop -grid, or -json for the table and grid")
	case set["svg-width"] && *svgOut == "":
		return usagef("-svg-width %d applies to the -svg timeline only; add -svg FILE, or drop -svg-width", *svgWidth)
	}
	if err := checkOutput(req.Inputs(), namedFile{Name: "-svg", Path: *svgOut}, formatSVG); err != nil {
		return err
	}
	if err := checkSVGWidth(*svgWidth); err != nil {
		return err
	}
	if *width < 20 || *width > maxGridWidth {
		return usagef("-width = %d; want 20 to %d columns", *width, maxGridWidth)
	}
	if *compare != "" {
		if req.Schedule != "" || req.In != "" || req.Virtual != 0 || req.Placement != "" || *grid {
			return usagef("-compare takes the schedules from its list: drop -schedule, -in, -virtual, -placement and -grid (write NAME:V in the list for a V)")
		}
		entries, err := auto.ParseCompare(*compare)
		if err != nil {
			return err
		}
		if err := auto.CheckCompareSize(entries, req.Ranks, req.Micro); err != nil {
			return err
		}
		pr := newProgress(stderr, "ppgen sim", len(entries))
		defer pr.Done()
		rows, err := req.Compare(entries, func(name string, done int) {
			if done > 0 {
				pr.Step()
			}
			pr.Phase("lowering and simulating %s", name)
		})
		if err != nil {
			return err
		}
		pr.Step()
		var svg []byte
		if *svgOut != "" {
			pr.Phase("rendering %s", *svgOut)
			svg = sim.SVGCompare(comparePanels(rows, *svgWidth)...)
		}
		pr.Done()
		if svg != nil {
			if err := writeSVG(*svgOut, svg, stderr); err != nil {
				return err
			}
		}
		if *asJSON {
			return writeCompareJSON(stdout, rows)
		}
		title := ""
		if req.Model != "" {
			split := "split evenly into each schedule's stages"
			if req.Partition == gencmd.PartitionAuto {
				split = "split for each schedule's order (-partition auto)"
			}
			title = fmt.Sprintf("P=%d M=%d cost from -model %s, its layers %s", req.Ranks, req.Micro, req.Model, split)
		} else {
			cost := sim.Cost{}
			if price, err := req.Pricing(); err == nil {
				cost, _ = price.Share(1)
			}
			title = fmt.Sprintf("P=%d M=%d cost %s per rank's share of the model (each of V stages per rank costs 1/V of it)", req.Ranks, req.Micro, cost)
		}
		return writeCompareTable(stdout, rows, title, req.Mem)
	}
	pr := newProgress(stderr, "ppgen sim", 0)
	defer pr.Done()
	res, cost, r, name, err := lowerAndSimulate(req, pr)
	if err != nil {
		return err
	}
	if *svgOut != "" {
		pr.Phase("rendering %s", *svgOut)
		svg := sim.SVG(r, res.Program, sim.SVGMeta{Schedule: name, Width: *svgWidth})
		pr.Done()
		if err := writeSVG(*svgOut, svg, stderr); err != nil {
			return err
		}
	}
	pr.Done()
	capped, err := req.MemoryCap(res.Result)
	if err != nil {
		return err
	}
	if r.LowerBound, r.LowerBoundExact, err = synth.LowerBound(res.Program, cost, capped, r.Makespan); err != nil {
		return err
	}
	if *asJSON {
		return writeSimJSON(stdout, req, res, r)
	}
	if res.Candidates != nil {
		if err := writeAutoTable(stdout, res); err != nil {
			return err
		}
		fmt.Fprintln(stdout, boundLine(r, memBinds(res, req.Mem, req.SmallestChunk(res.Result))))
	} else if res.Recompute != "" {
		fmt.Fprintln(stdout, recomputeChoice(res.Recompute, req.Mem))
	}
	fmt.Fprintf(stdout, "%s: P=%d S=%d M=%d cost %s\n", name, res.Program.Placement.Ranks(), res.Program.Stages(), res.Program.Micro, cost)
	fmt.Fprintf(stdout, "makespan %.4g  bubble %.4f  stage-span bubble %.4f\n", r.Makespan, r.Bubble, r.BubbleSpan)
	fmt.Fprintf(stdout, "busy per rank %s\n", floats(r.Busy))
	fmt.Fprintf(stdout, "peak activations per rank %s\n", peaks(r.PeakActivations, r.PeakLive))
	if line := recomputedLayers(res.Program, res.Layers); line != "" {
		fmt.Fprintln(stdout, line)
	}
	if *grid {
		fmt.Fprint(stdout, sim.Grid(r, res.Program, *width))
	}
	return nil
}

// simJSON is the object sim -json prints: the schedule simulated and its V
// (as in a -compare row), the -recompute policy auto chose with it (when
// it chose one), then sim.Summary's fields.
type simJSON struct {
	Schedule  string `json:"schedule"`
	Virtual   int    `json:"virtual"`
	Recompute string `json:"recompute,omitempty"`
	Swap      int    `json:"swap,omitempty"`
	sim.Summary
}

// writeSimJSON prints r as sim -json's object, indented, in a line of its
// own.
func writeSimJSON(w io.Writer, req *gencmd.Request, res auto.Result, r sim.Result) error {
	name, v := simulated(req, res)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(simJSON{Schedule: name, Virtual: v, Recompute: res.Recompute, Swap: res.Swap, Summary: r.Summary()}); err != nil {
		return fmt.Errorf("encoding the JSON summary: %w", err)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// simulated names the schedule res runs and its virtual stages per rank:
// for -schedule auto the family and V it chose, for -in the file's name
// and its stages per rank, else the family and V of the flags (V resolved
// to the family's default).
func simulated(req *gencmd.Request, res auto.Result) (string, int) {
	if res.Config.Schedule != "" && res.Config.Virtual > 0 {
		return res.Config.Schedule, res.Config.Virtual
	}
	v := 0
	if ranks := res.Program.Placement.Ranks(); ranks > 0 {
		v = res.Program.Stages() / ranks
	}
	return req.ScheduleName(), v
}

// The widths of sim's drawings: a grid is at most maxGridWidth columns wide
// per rank, an SVG timeline at most maxSVGWidth pixels.
const (
	maxGridWidth = 10000
	maxSVGWidth  = 100000
)

// checkSVGWidth checks -svg-width (sim, report).
func checkSVGWidth(w int) error {
	if w < 200 || w > maxSVGWidth {
		return usagef("-svg-width = %d; want 200 to %d pixels", w, maxSVGWidth)
	}
	return nil
}

// lowerAndSimulate lowers the schedule of the flags, simulates it under the
// -cost (which auto also chooses by) and names it for titles: what sim and
// report share.
func lowerAndSimulate(req *gencmd.Request, pr *progress) (auto.Result, sim.Cost, sim.Result, string, error) {
	res, err := lower(req, pr)
	if err != nil {
		return res, sim.Cost{}, sim.Result{}, "", err
	}
	price, err := req.Pricing()
	if err != nil {
		return res, sim.Cost{}, sim.Result{}, "", err
	}
	share := 0
	if res.Candidates != nil {
		share = res.StagesPerShare() // auto chose by one rank's share
	}
	cost, err := price.Program(res.Program, res.Layers, share)
	if err != nil {
		return res, cost, sim.Result{}, "", err
	}
	pr.Phase("simulating %d steps", res.Program.NumSteps())
	r, err := sim.Run(res.Program, cost)
	if err != nil {
		return res, cost, r, "", err
	}
	name := req.ScheduleName()
	if res.Candidates != nil {
		name = autoName(res)
	}
	return res, cost, r, name, nil
}

func floats(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.4g", x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// peaks writes the peak live chunks per rank, and, where a selective
// recompute policy makes a peak fractional (live, which the whole
// numbers round up), those too: "[3 2] (live chunks [2.5 2])".
func peaks(whole []int, live []float64) string {
	out := fmt.Sprint(whole)
	for r, v := range live {
		if r < len(whole) && math.Abs(v-float64(whole[r])) > 1e-9 {
			return out + " (live chunks " + floats(live) + ")"
		}
	}
	return out
}

// recomputedLayers says, for a program whose RECOMPUTE steps re-run named
// layers (-recompute model, ir.Program.RecomputeLayers), what each
// recomputing stage re-runs: the model's layers (by their index in the
// -model file, bounds the split of one copy's layers; within the stage
// without it) with their share of the stage's activations and of its R,
// or the whole stage; "" for any other program.
func recomputedLayers(p ir.Program, bounds []int) string {
	if p.RecomputeLayers == nil {
		return ""
	}
	var parts []string
	for _, s := range emit.RebuiltStages(p, abi.Recompute) {
		var ls []int
		if s < len(p.RecomputeLayers) {
			ls = p.RecomputeLayers[s]
		}
		if ls == nil {
			parts = append(parts, fmt.Sprintf("stage %d whole", s))
			continue
		}
		first := 0
		if n := len(bounds) - 1; n > 0 {
			first = bounds[s%n]
		}
		idx := make([]string, len(ls))
		for i, l := range ls {
			idx[i] = strconv.Itoa(first + l)
		}
		parts = append(parts, fmt.Sprintf("stage %d layers %s (act %.4g, R %.4g)", s, strings.Join(idx, ","), p.RecomputePart(s), p.RecomputeCostPart(s)))
	}
	return "recomputed layers: " + strings.Join(parts, "; ")
}

func runGen(args []string, stdout, stderr io.Writer) error {
	req, err := parseGen(args, gencmd.EnvFromOS())
	if err != nil {
		return err
	}
	out := namedFile{Name: "-o", Path: req.Path()}
	if req.Out == "" {
		out.Name = "the default output"
	}
	if err := checkOutputs(req.Inputs(), out); err != nil {
		return err
	}
	if err := checkFormat(namedFile{Name: "-o", Path: req.Out}, formatGo); err != nil {
		return err
	}
	if fi, err := os.Stat(req.Path()); err == nil && fi.IsDir() {
		return usagef("-o %s is a directory; name the file to write, e.g. -o %s", req.Path(), filepath.Join(req.Path(), "schedule_gen.go"))
	}
	pr := newProgress(stderr, "ppgen gen", 0)
	showAuto(req, pr)
	src, res, err := req.Generate()
	pr.Done()
	if err != nil {
		return err
	}
	path := req.Path()
	if path == "-" {
		_, err = stdout.Write(src)
		noteAuto(stderr, res, req.Mem)
		return err
	}
	verb := "wrote"
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, src) {
			verb = "kept" // writeFileAtomic leaves an unchanged file untouched
		}
	}
	if err := writeFileAtomic(path, src); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "ppgen: %s %s (%d ranks, %d steps)\n", verb, path, res.Program.Placement.Ranks(), res.Program.NumSteps())
	noteAuto(stderr, res, req.Mem)
	return nil
}

// parseGen parses the arguments of `ppgen gen` (gen/gencmd holds its
// flags, shared with diff, check and vet, which regenerate in memory): -h
// prints the flags, and bad flags are usage errors.
func parseGen(args []string, env gencmd.Env) (*gencmd.Request, error) {
	req, err := gencmd.Parse(args, env)
	if errors.Is(err, flag.ErrHelp) {
		return nil, helpRequest{gencmd.GenFlags(new(gencmd.Request))}
	}
	return req, err
}
