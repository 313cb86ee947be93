package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTune: ppgen tune writes a model that -model reads (sim of it runs),
// prints the table where the model does not go, and on bad input exits 2
// with the reason and writes nothing.
func TestTune(t *testing.T) {
	const trace = "../../gen/tune/testdata/dualpipev-wide.json"
	dir := t.TempDir()
	out := filepath.Join(dir, "model.json")
	code, stdout, stderr := cliRun(t, "tune", "-trace", trace, "-o", out, "-stages", "8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(stdout, `fitted 8 layers, one per stage, from 192 calls of "dualpipev"`) || strings.Count(stdout, "\nstage") != 8 {
		t.Errorf("table:\n%s", stdout)
	}
	if stderr != "ppgen: wrote "+out+"\n" {
		t.Errorf("stderr %q", stderr)
	}
	if sim := cliMust(t, "sim", "-schedule", "1f1b", "-ranks", "4", "-micro", "8", "-model", out); !strings.Contains(sim, "makespan") {
		t.Errorf("sim -model of the fitted model:\n%s", sim)
	}
	// With -o - the model goes to stdout and the table to stderr.
	code, stdout, stderr = cliRun(t, "tune", "-trace", trace)
	if code != 0 || !strings.HasPrefix(stdout, `{"layers": [`) || !strings.HasPrefix(stderr, "fitted 8 layers") {
		t.Errorf("-o -: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"traceEvents":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(dir, "model2.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tune", "-o", out2}, "missing -trace"},
		{[]string{"tune", "-trace", filepath.Join(dir, "none.json"), "-o", out2}, "reading -trace"},
		{[]string{"tune", "-trace", bad, "-o", out2}, "no stage calls"},
		{[]string{"tune", "-trace", trace, "-stages", "4", "-o", out2}, "calls of 8 stages but -stages is 4"},
		{[]string{"tune", "-trace", trace, "-copies", "3", "-o", out2}, "-copies 3, but the trace's micro-batches, over its 8 stages, run stages of both halves: one model copy"},
		{[]string{"tune", "-trace", trace, "-o", filepath.Join(dir, "no", "model.json")}, "does not exist"},
	} {
		code, _, stderr := cliRun(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("ppgen %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if _, err := os.Stat(out2); err == nil {
		t.Errorf("a failed tune wrote %s", out2)
	}
}

// TestTuneSimTrace: a trace of ppgen trace holds sends without sizes: tune
// fits comm to their durations and says why there is no bw.
func TestTuneSimTrace(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.json")
	cliMust(t, "trace", "-schedule", "zb-h1", "-ranks", "2", "-micro", "4", "-cost", "comm=0.25", "-o", tr)
	code, stdout, stderr := cliRun(t, "tune", "-trace", tr, "-o", filepath.Join(dir, "m.json"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(stdout, "no sends") || !strings.Contains(stdout, "comm 0.25 ms: the median of 8 sends; they carry no sizes") {
		t.Errorf("table:\n%s", stdout)
	}
}

// TestTuneRoundTrip: the simulated traces of a schedule without split
// backwards (1f1b: B calls) and of one with two model copies and overlap
// steps (dualpipe) fit back the costs they were simulated under: the
// fitted model simulates the schedule to the same makespan. dualpipe's
// copies are read from the micro-batches; -copies 1 is refused.
func TestTuneRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		schedule, cost, table string
	}{
		{"1f1b", "F=2,B=3", "8/0/0/8"},
		{"dualpipe", "F=2,I=1.5,W=0.5", "skipped 12 overlap steps"},
	} {
		tr, m := filepath.Join(dir, tc.schedule+".json"), filepath.Join(dir, tc.schedule+"-model.json")
		cliMust(t, "trace", "-schedule", tc.schedule, "-ranks", "4", "-micro", "8", "-cost", tc.cost, "-o", tr)
		code, stdout, stderr := cliRun(t, "tune", "-trace", tr, "-o", m)
		if code != 0 || !strings.Contains(stdout, tc.table) {
			t.Fatalf("%s: exit %d, table:\n%s%s", tc.schedule, code, stdout, stderr)
		}
		_, want, _ := cliRun(t, "sim", "-schedule", tc.schedule, "-ranks", "4", "-micro", "8", "-cost", tc.cost, "-json")
		_, got, _ := cliRun(t, "sim", "-schedule", tc.schedule, "-ranks", "4", "-micro", "8", "-model", m, "-json")
		ms := func(s string) string {
			_, after, _ := strings.Cut(s, `"makespan":`)
			v, _, _ := strings.Cut(after, ",")
			return v
		}
		if ms(got) == "" || ms(got) != ms(want) {
			t.Errorf("%s: the fitted model simulates to %s; the costs it was traced under to %s", tc.schedule, got, want)
		}
	}
	code, _, stderr := cliRun(t, "tune", "-trace", filepath.Join(dir, "dualpipe.json"), "-copies", "1", "-o", filepath.Join(dir, "x.json"))
	if code != 2 || !strings.Contains(stderr, "-copies 1, but the trace's micro-batches, over its 8 stages, each run one half of them: 2 model copies") {
		t.Errorf("-copies 1 on dualpipe: exit %d, %s", code, stderr)
	}
}
