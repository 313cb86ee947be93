package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/internal/long"
)

// TestAutoCommands: -schedule auto through sim (the candidate table, the
// choice marked), gen (the choice recorded in Spec, the flags in the header,
// so that check regenerates the same file) and the usage errors of -mem and
// -cost with a fixed schedule.
func TestAutoCommands(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"sim", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "3", "-cost", "F=1,B=2,W=1,overlap=1"}, &stdout, &stderr); code != 0 {
		t.Fatalf("sim: exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "CANDIDATE") || strings.Count(out, "\n* ") != 1 || !strings.Contains(out, "over the limit 3") || !strings.Contains(out, "auto: ") {
		t.Errorf("sim output:\n%s", out)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "schedule_gen.go")
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"gen", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "3", "-cost", "F=1,B=2,W=1,overlap=1", "-package", "p", "-o", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr.String())
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "// ppgen gen -cost F=1,B=2,W=1,overlap=1 -mem 3 -micro 8 -package p -ranks 4 -schedule auto\n") ||
		strings.Contains(string(src), `Schedule:    "auto"`) || !strings.Contains(stderr.String(), "the best of") {
		t.Errorf("gen: stderr %s\nheader and spec:\n%s", stderr.String(), string(src)[:min(len(src), 900)])
	}
	stderr.Reset()
	if code := run([]string{"check", path}, &stdout, &stderr); code != 0 {
		t.Errorf("check of the auto file: exit %d: %s", code, stderr.String())
	}

	for _, args := range [][]string{
		{"gen", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-mem", "3", "-o", "-"},
		{"show", "-schedule", "zbv", "-ranks", "4", "-micro", "8", "-cost", "F=1"},
		{"gen", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "-1", "-o", "-"},
	} {
		stderr.Reset()
		if code := run(args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "-mem") {
			t.Errorf("%v: exit %d, want 2 and a word on -mem: %s", args, code, stderr.String())
		}
	}
	// Below every family's memory auto recomputes (gen/auto's
	// TestAutoRecompute; here 14 stages whole and half of the 15th) and
	// names the policy; below even that (a chunk of
	// V = 4 is 0.25 of a share) nothing fits.
	stderr.Reset()
	if code := run([]string{"gen", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "0.5", "-o", "-"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stderr.String(), "-recompute selective:0=1,") {
		t.Errorf("-mem 0.5: exit %d: %s", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"gen", "-schedule", "auto", "-ranks", "4", "-micro", "8", "-mem", "0.2", "-o", "-"}, &stdout, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "no schedule fits the activation memory limit 0.2") {
		t.Errorf("-mem 0.2: exit %d: %s", code, stderr.String())
	}
}

// TestBoundLineNamesABindingCap: the lower-bound line of auto's table gets
// its second line, that the bound does not count the cap's steady-state
// cost, only when -mem binds (the choice uses all of it) and the gap is
// over 1 %; end to end on the W = 0.6·I model with -mem at the choice's
// peak, on the LLM-like model with a limit half a chunk over it, and on a
// uniform cost where the choice meets the bound.
//
// By default the searches run at -budget 1 on 4 micro-batches (a gap of a
// few %, the hint's cases unchanged); PPGEN_LONG=1 runs them at 8
// micro-batches and the default budget, as a user would (minutes).
func TestBoundLineNamesABindingCap(t *testing.T) {
	const hint = "-mem binds"
	for _, tc := range []struct {
		makespan, bound float64
		binds, want     bool
		exact           bool
	}{
		{215.8, 195.4, true, true, false},
		{215.8, 195.4, false, false, false},
		{97.75, 97.75, true, false, false}, // the bound met: nothing to explain
		{100.5, 100, true, false, false},   // 0.5 %: within the threshold
		{50, 0, true, false, false},        // no bound
		{54, 51, true, false, true},        // proved by exhaustive search: the optimum
	} {
		line := boundLine(sim.Result{Makespan: tc.makespan, LowerBound: tc.bound, LowerBoundExact: tc.exact}, tc.binds)
		if tc.exact != strings.Contains(line, "exhaustive search") {
			t.Errorf("makespan %g, bound %g, exact %v: %s", tc.makespan, tc.bound, tc.exact, line)
		}
		if got := strings.Contains(line, hint); got != tc.want {
			t.Errorf("makespan %g, bound %g, binds %v: hint %v, want %v:\n%s", tc.makespan, tc.bound, tc.binds, got, tc.want, line)
		}
	}
	res := auto.Result{Result: gen.Result{Config: ir.Config{Schedule: "zbv", Virtual: 2}}, Candidates: []auto.Candidate{
		{Config: ir.Config{Schedule: "1f1b", Virtual: 1}, ActMem: 16},
		{Config: ir.Config{Schedule: "zbv", Virtual: 2}, ActMem: 12},
	}}
	for _, tc := range []struct {
		limit float64
		want  bool
	}{{0, false}, {16, false}, {12.5, false}, {12.4, true}, {12, true}, {11.5, true}} {
		if got := memBinds(res, tc.limit, 0.5); got != tc.want {
			t.Errorf("memBinds(limit %g) = %v, want %v (the choice holds 12, a chunk 0.5)", tc.limit, got, tc.want)
		}
	}

	var stdout, stderr bytes.Buffer
	model := filepath.Join("..", "..", "examples", "models", "uniform_w06.json")
	llm := filepath.Join("..", "..", "examples", "models", "llm.json")
	// size: the default suite's micro-batches, activation limit and budget;
	// the long suite's in full.
	micro, wideMem, budget := "4", "8", []string{"-budget", "1"}
	if long.Enabled() {
		micro, wideMem, budget = "8", "16", nil
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{append([]string{"sim", "-schedule", "auto", "-model", model, "-ranks", "4", "-micro", micro, "-mem", wideMem}, budget...), true},
		// The choice holds 18 of 18.5, its chunks 1 or more: no other fits
		// (-recompute none: with recompute, interleaved-zb V=3 recomputing
		// its first 8 stages meets the bound at M = 4, 140.3).
		{append([]string{"sim", "-schedule", "auto", "-model", llm, "-partition", "auto", "-ranks", "4", "-micro", micro, "-mem", "18.5", "-recompute", "none"}, budget...), true},
		{[]string{"sim", "-schedule", "auto", "-ranks", "8", "-micro", "32", "-cost", "overlap=1", "-mem", "8"}, false}, // binds, 0.0 %
	} {
		stdout.Reset()
		stderr.Reset()
		if code := run(tc.args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, stderr.String())
		}
		if got := strings.Contains(stdout.String(), "\n  "+hint); got != tc.want {
			t.Errorf("%v: hint %v, want %v:\n%s", tc.args, got, tc.want, stdout.String())
		}
	}
}

// TestAutoChoiceReported: every command that takes -schedule auto says what
// it chose, the same family and V as sim's table: verify in its ok line,
// sim -json in schedule and virtual, trace in otherData.schedule (the
// command keeping -schedule auto), and gen, show and export on stderr. A
// schedule given by name is reported as given, with its V resolved.
func TestAutoChoiceReported(t *testing.T) {
	flags := []string{"-schedule", "auto", "-ranks", "2", "-micro", "4"}
	with := func(args ...string) []string { return append(args, flags...) }
	out := cliMust(t, with("sim")...)
	m := regexp.MustCompile(`(?m)^auto: (\S+) V=(\d+): `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("sim -schedule auto names no choice:\n%s", out)
	}
	family, v := m[1], m[2]
	choice := "auto: " + family + " V=" + v + ": "

	if got := cliMust(t, with("verify")...); !strings.HasPrefix(got, "ok (auto chose "+family+" V="+v+"): 2 ranks, ") {
		t.Errorf("verify -schedule auto: %q; want it to start with ok (auto chose %s V=%s)", got, family, v)
	}

	var trace traceFile
	if err := json.Unmarshal([]byte(cliMust(t, with("trace")...)), &trace); err != nil {
		t.Fatal(err)
	}
	if got, cmd := trace.OtherData["schedule"], trace.OtherData["command"]; got != family || !strings.Contains(cmd.(string), "-schedule auto") {
		t.Errorf("trace otherData: schedule %v, command %v; want %s and the command line with -schedule auto", got, cmd, family)
	}

	for _, args := range [][]string{
		with("show"),
		with("show", "-compute-only"),
		with("export", "-to", "torch-csv"),
		with("gen", "-package", "p", "-o", "-"),
		with("trace"),
	} {
		code, _, stderr := cliRun(t, args...)
		if code != 0 || !strings.Contains(stderr, "ppgen: "+choice) {
			t.Errorf("%v: exit %d, stderr %q; want the line ppgen: %s...", args, code, stderr, choice)
		}
	}
	if code, _, stderr := cliRun(t, "show", "-schedule", "zbv", "-ranks", "2", "-micro", "4"); code != 0 || stderr != "" {
		t.Errorf("show -schedule zbv: exit %d, stderr %q; want nothing on stderr", code, stderr)
	}

	in := filepath.Join(t.TempDir(), "interleaved.txt")
	if err := os.WriteFile(in, []byte(cliMust(t, "show", "-schedule", "interleaved", "-ranks", "2", "-micro", "4")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		want    string
		virtual int
	}{
		{"auto", with("sim", "-json"), family, atoi(t, v)},
		{"family", []string{"sim", "-json", "-schedule", "1f1b", "-ranks", "2", "-micro", "4"}, "1f1b", 1},
		{"default V", []string{"sim", "-json", "-schedule", "interleaved", "-ranks", "2", "-micro", "4"}, "interleaved", 2},
		{"-in", []string{"sim", "-json", "-in", in}, "interleaved.txt", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got struct {
				Schedule *string  `json:"schedule"`
				Virtual  *int     `json:"virtual"`
				Makespan *float64 `json:"makespan"`
			}
			if err := json.Unmarshal([]byte(cliMust(t, tc.args...)), &got); err != nil {
				t.Fatal(err)
			}
			if got.Schedule == nil || *got.Schedule != tc.want || got.Virtual == nil || *got.Virtual != tc.virtual || got.Makespan == nil {
				t.Errorf("%v: schedule %v, virtual %v, makespan %v; want %q, %d and a makespan", tc.args, deref(got.Schedule), deref(got.Virtual), deref(got.Makespan), tc.want, tc.virtual)
			}
		})
	}
}

// deref is *p, or nil when p is.
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
