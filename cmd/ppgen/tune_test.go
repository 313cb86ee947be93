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
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tune", "-o", out + "2"}, "missing -trace"},
		{[]string{"tune", "-trace", filepath.Join(dir, "none.json"), "-o", out + "2"}, "reading -trace"},
		{[]string{"tune", "-trace", bad, "-o", out + "2"}, "no stage calls"},
		{[]string{"tune", "-trace", trace, "-stages", "4", "-o", out + "2"}, "calls of 8 stages but -stages is 4"},
		{[]string{"tune", "-trace", trace, "-copies", "3", "-o", out + "2"}, "8 stages do not form 3 model copies"},
		{[]string{"tune", "-trace", trace, "-o", filepath.Join(dir, "no", "model.json")}, "does not exist"},
	} {
		code, _, stderr := cliRun(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("ppgen %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if _, err := os.Stat(out + "2"); err == nil {
		t.Errorf("a failed tune wrote %s", out+"2")
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
