package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen/tune"
)

// runTune fits a model description to a measured timeline (gen/tune) and
// writes it; the table of fitted costs goes where the model does not.
func runTune(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	trace := fs.String("trace", "", "the measured timeline: a Chrome trace written by pipe.Timeline (the -trace of examples/mlp)")
	out := fs.String("o", "-", "the model description to write (- for stdout)")
	stages := fs.Int("stages", 0, "the number of stages the trace must have (0: any)")
	copies := fs.Int("copies", 0, "the number of model copies the trace's stages form (dualpipe: 2): stage s then runs the layers of stage s mod S/copies (0: read from the trace's micro-batches, one copy when it names none; a value they contradict is refused)")
	rcost := fs.String("recompute-cost", "", "per stage of the trace, the share of the stage's R one of its RECOMPUTE calls cost in the traced program (comma-separated, e.g. 0.25,0.25,1; 0 or left out: the trace's otherData.recompute_cost, which ppgen trace and pipe.Timeline write, else 1): each R call is divided by it, so that the fitted R is the whole stage's, of which the simulator charges a RECOMPUTE its share; it overrides the trace's, and is needed only for a Timeline of a hand-written Spec with RecomputeLayers and no RecomputeCost (the marked layers' R share, which `ppgen sim` prints as \"recomputed layers: stage S layers ... R SHARE\"; a generated Spec carries it)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var shares []float64
	if *rcost != "" {
		for i, w := range strings.Split(*rcost, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(w), 64)
			if err != nil {
				return usagef("-recompute-cost %q: stage %d's share %q is not a number; want shares in (0, 1], 0 for the trace's", *rcost, i, w)
			}
			shares = append(shares, v)
		}
	}
	if *trace == "" {
		return usagef("missing -trace FILE (the measured timeline of a training step)")
	}
	if err := checkOut(*out); err != nil {
		return err
	}
	if err := checkOutput([]namedFile{{Name: "-trace", Path: *trace}}, namedFile{Name: "-o", Path: *out}, formatModel); err != nil {
		return err
	}
	f, err := os.Open(*trace)
	if err != nil {
		return usagef("reading -trace: %v", err)
	}
	defer f.Close()
	fit, err := tune.Read(f, tune.Options{Stages: *stages, Copies: *copies, RecomputeCost: shares})
	if err != nil {
		return usagef("-trace %s: %v", *trace, err)
	}
	table := stdout
	if *out == "-" {
		table = stderr
	}
	if err := writeOutput(*out, fit.JSON(), stdout, stderr, ""); err != nil {
		return err
	}
	return writeTuneTable(table, fit)
}

// writeTuneTable prints one row per stage: its rank and fitted costs.
func writeTuneTable(w io.Writer, fit tune.Fit) error {
	var b strings.Builder
	from := ""
	if fit.Schedule != "" {
		from = " of " + strconv.Quote(fit.Schedule)
	}
	per := "one per stage"
	if fit.Copies > 1 {
		per = fmt.Sprintf("one per stage of each of %d model copies (stage s and s + %d fitted together)", fit.Copies, len(fit.Stages))
	}
	fmt.Fprintf(&b, "fitted %d layers, %s, from %d calls%s (the median call of each kind, ms)\n", len(fit.Stages), per, fit.Calls, from)
	full := false
	for _, st := range fit.Stages {
		full = full || st.Full()
	}
	if full {
		fmt.Fprintf(&b, "%-6s  %4s  %10s  %10s  %10s  %10s  %8s  %s\n", "LAYER", "RANK", "F", "I", "W", "B", "ACT KiB", "CALLS F/I/W/B")
	} else {
		fmt.Fprintf(&b, "%-6s  %4s  %10s  %10s  %10s  %8s  %s\n", "LAYER", "RANK", "F", "I", "W", "ACT KiB", "CALLS F/I/W")
	}
	for s, st := range fit.Stages {
		rank := strconv.Itoa(st.Rank)
		if st.Rank < 0 {
			rank = "many"
		}
		if !full {
			fmt.Fprintf(&b, "%-6s  %4s  %10.4g  %10.4g  %10.4g  %8.4g  %d/%d/%d\n", fmt.Sprintf("stage%d", s), rank, st.F, st.I, st.W, st.Act, st.Calls[0], st.Calls[1], st.Calls[2])
			continue
		}
		i, w, bb := fmt.Sprintf("%.4g", st.I), fmt.Sprintf("%.4g", st.W), "-"
		if st.Full() {
			i, w, bb = "-", "-", fmt.Sprintf("%.4g", st.B)
		}
		fmt.Fprintf(&b, "%-6s  %4s  %10.4g  %10s  %10s  %10s  %8.4g  %d/%d/%d/%d\n", fmt.Sprintf("stage%d", s), rank, st.F, i, w, bb, st.Act, st.Calls[0], st.Calls[1], st.Calls[2], st.BCalls)
	}
	var rs []string
	for s, st := range fit.Stages {
		if st.RCalls > 0 {
			share := ""
			if st.RShare > 0 && st.RShare < 1 {
				share = fmt.Sprintf(" of share %.4g", st.RShare)
			}
			rs = append(rs, fmt.Sprintf("stage%d %.4g (%d calls%s)", s, st.R, st.RCalls, share))
		}
	}
	if len(rs) > 0 {
		fmt.Fprintf(&b, "R, the whole stage's recompute (ms: the median RECOMPUTE call over its share of the stage): %s; the other stages recompute at their F\n", strings.Join(rs, ", "))
	}
	if fit.Overlapped > 0 {
		fmt.Fprintf(&b, "skipped %d overlap steps (a forward and a backward in one event: their times are not told apart)\n", fit.Overlapped)
	}
	if full {
		b.WriteString("B: the full backward, fitted where a stage has no I and W calls (a schedule without split backwards); the model splits it evenly into I and W\n")
	}
	switch {
	case fit.Sends == 0:
		b.WriteString("no sends in the trace (comm events of SEND_F or SEND_B): no comm or bw\n")
	case fit.Unsized == fit.Sends:
		fmt.Fprintf(&b, "comm %.4g ms: the median of %d sends; they carry no sizes (args.bytes), so no bw can be fitted (a simulated trace of ppgen trace has none; the measured timeline of runtime/pipe, pipe.Timeline.WriteTrace or the -trace of examples/mlp, has them)\n", fit.Comm, fit.Sends)
	case fit.BW == 0:
		fmt.Fprintf(&b, "comm %.4g ms: the median of %d sends (one size, or times that do not grow with it: no bw)\n", fit.Comm, fit.Sends)
	default:
		fmt.Fprintf(&b, "comm %.4g ms + size / bw %.4g KiB per ms: fitted to %d sends\n", fit.Comm, fit.BW, fit.Sends)
	}
	if fit.OptSteps > 0 || fit.Reductions > 0 {
		// The trainer's host work (runtime/train's spans): the model file
		// has no keys for it; the simulator takes it as -cost keys.
		fmt.Fprintf(&b, "opt %.4g ms (the slowest rank's median OPT_STEP of %d), allreduce %.4g ms beyond comm (the median of %d reductions): -cost opt=%.4g,allreduce=%.4g\n",
			fit.Opt, fit.OptSteps, fit.AllReduce, fit.Reductions, fit.Opt, fit.AllReduce)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
