package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/sim"
)

// autoName names the auto scheduler's choice: "auto: zbv V=2", with its
// recompute policy or swap distance when it has one ("auto: zbv V=2
// -recompute full:0@idle", "auto: 1f1b V=1 -swap 5").
func autoName(res auto.Result) string {
	return fmt.Sprintf("auto: %s V=%d", res.Config.Schedule, res.Config.Virtual) + autoExtra(res.Recompute, res.Swap)
}

// autoExtra is the flags a chosen candidate adds to its family: its
// -recompute policy and its -swap distance (-swap auto), "" for none.
func autoExtra(recompute string, swap int) string {
	s := ""
	if recompute != "" {
		s += " -recompute " + recompute
	}
	if swap != 0 {
		s += fmt.Sprintf(" -swap %d", swap)
	}
	return s
}

// chosen reports whether c is the candidate auto chose.
func chosen(res auto.Result, c auto.Candidate) bool {
	return c.Config.Schedule == res.Config.Schedule && c.Config.Virtual == res.Config.Virtual && c.Skipped == "" &&
		slices.Equal(c.Layers, res.Layers) && c.Recompute == res.Recompute && c.Swap == res.Swap
}

// autoChoice says what the auto scheduler chose and why, in one line.
func autoChoice(res auto.Result) string {
	for _, c := range res.Candidates {
		if chosen(res, c) {
			return fmt.Sprintf("%s: makespan %.4g, activation memory %.4g, the best of %d candidates", autoName(res), c.Makespan, c.ActMem, len(res.Candidates))
		}
	}
	return autoName(res)
}

// recomputeChoice says in one line which -recompute policy a split of a
// -model's layers chose under -mem (ppgen partition, and -partition auto
// on a family).
func recomputeChoice(policy string, mem float64) string {
	return fmt.Sprintf("recompute %s: chosen under -mem %.4g, where it fits the fastest split (give -recompute to fix the policy; docs/model.md)", policy, mem)
}

// noteAuto says on stderr what the auto scheduler chose, for a command
// whose output (Go source, a program, a CSV file, a trace) does not: gen,
// show, export and trace; for a family with -partition auto, the
// -recompute policy it chose under -mem. Nothing where nothing was chosen.
func noteAuto(stderr io.Writer, res auto.Result, mem float64) {
	switch {
	case res.Candidates != nil:
		fmt.Fprintf(stderr, "ppgen: %s (`ppgen sim` with the same flags lists the candidates)\n", autoChoice(res))
	case res.Recompute != "":
		fmt.Fprintf(stderr, "ppgen: %s\n", recomputeChoice(res.Recompute, mem))
	}
}

// writeAutoTable prints the candidates the auto scheduler tried, the chosen
// one marked with *.
func writeAutoTable(w io.Writer, res auto.Result) error {
	nameW := len("CANDIDATE")
	for _, c := range res.Candidates {
		nameW = max(nameW, len(c.Config.Schedule))
	}
	split := false // a SPLIT column: candidates run a model's layers
	for _, c := range res.Candidates {
		split = split || c.Layers != nil
	}
	name := func(c auto.Candidate) string {
		var notes []string
		switch {
		case !split:
		case c.Partitioned:
			notes = append(notes, "partition")
		default:
			notes = append(notes, "even")
		}
		if c.Recompute != "" {
			notes = append(notes, "recompute "+c.Recompute)
		}
		if c.Swap != 0 {
			notes = append(notes, fmt.Sprintf("swap %d", c.Swap))
		}
		if len(notes) == 0 {
			return c.Config.Schedule
		}
		return c.Config.Schedule + " (" + strings.Join(notes, ", ") + ")"
	}
	for _, c := range res.Candidates {
		nameW = max(nameW, len(name(c)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %-*s  %2s  %8s  %6s  %7s  %s\n", nameW, "CANDIDATE", "V", "MAKESPAN", "BUBBLE", "ACT MEM", "NOTE")
	marked := false // an even and a partitioned candidate may run the same split
	for _, c := range res.Candidates {
		mark := " "
		if chosen(res, c) && !marked {
			mark, marked = "*", true
		}
		if c.Makespan == 0 && c.ActMem == 0 {
			fmt.Fprintf(&b, "%s %-*s  %2d  %8s  %6s  %7s  %s\n", mark, nameW, name(c), c.Config.Virtual, "-", "-", "-", c.Skipped)
			continue
		}
		fmt.Fprintf(&b, "%s %-*s  %2d  %8s  %5.1f%%  %7s  %s\n", mark, nameW, name(c), c.Config.Virtual,
			strconv.FormatFloat(c.Makespan, 'g', 6, 64), 100*c.Bubble, strconv.FormatFloat(c.ActMem, 'g', 4, 64), c.Skipped)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// boundLine states the lower bound of the simulated result and the gap of
// its makespan to it; when the memory limit binds (capBinds) and the gap
// is over 1 %, also that the bound does not count what the cap costs in
// the steady state, so the gap need not be the order's to close. A bound
// an exhaustive search proved (r.LowerBoundExact) is the optimum, and the
// line says so instead.
func boundLine(r sim.Result, capBinds bool) string {
	gap := 0.0
	if r.LowerBound > 0 {
		gap = 100 * (r.Makespan/r.LowerBound - 1)
	}
	if r.LowerBoundExact {
		return fmt.Sprintf("lower bound %.4g (the least makespan of any order of these stages' compute steps, by exhaustive search; docs/model.md): the makespan is %.1f%% over it", r.LowerBound, gap)
	}
	line := fmt.Sprintf("lower bound %.4g (no order of these stages is faster; docs/model.md): the makespan is %.1f%% over it", r.LowerBound, gap)
	if capBinds && gap > 1 {
		line += "\n  -mem binds: the bound counts the cap at the pipeline's start and end, for each stage alone and in the waits it forces between micro-batches, not how waiting for busy ranks stretches the chunks' lives in the steady state, so part of the gap may be the cap's (docs/model.md, \"What the bound leaves out\")"
	}
	return line
}

// memBinds reports whether the chosen candidate of an auto result leaves
// less of the memory limit (in the model's or the chunks' units; 0: none)
// than chunk, the smallest chunk one of its stages holds
// (gencmd.Request.SmallestChunk): no further chunk fits, even where the
// limit is not a whole number of chunks (the LLM-like model's 18.5 against
// chunks of 1).
func memBinds(res auto.Result, limit, chunk float64) bool {
	if limit <= 0 {
		return false
	}
	for _, c := range res.Candidates {
		if chosen(res, c) {
			return c.ActMem+chunk > limit*(1+1e-9)
		}
	}
	return false
}
