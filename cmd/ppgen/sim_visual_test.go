package main

import (
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The schedules of docs/visual.md's comparison: every family that lowers.
const compareAll = "gpipe,1f1b,interleaved,looped-bfs,zb-h1,zb-h2,interleaved-zb,zbv,v-half,v-min,dualpipev"

func wellFormedXML(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(b)))
	for {
		if _, err := d.Token(); err == io.EOF {
			return
		} else if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
}

// TestSimSVGGolden pins the SVG timelines the docs show: docs/zbv_p4_m8.svg
// (the README's image) and docs/compare_p4_m8.svg are the golden files.
func TestSimSVGGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		args   []string
		report string // a line of the text report, still printed
	}{
		{"../../docs/zbv_p4_m8.svg", []string{"-schedule", "zbv", "-ranks", "4", "-micro", "8"}, "makespan 51  bubble 0.0588"},
		{"../../docs/compare_p4_m8.svg", []string{"-compare", "1f1b,interleaved,zbv", "-ranks", "4", "-micro", "8"}, "zbv           2      25.5    5.9%"},
	} {
		t.Run(filepath.Base(tc.golden), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out.svg")
			code, out, errs := cliRun(t, append(append([]string{"sim"}, tc.args...), "-svg", path)...)
			if code != 0 || !strings.Contains(out, tc.report) || errs != "ppgen: wrote "+path+"\n" {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errs)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			wellFormedXML(t, b)
			cliGolden(t, tc.golden, b)
		})
	}
}

// TestSimSVGContent checks what a reader needs in the zbv timeline: a title
// with the schedule, P, V, M, bubble and peak activations; one lane per
// rank; every compute step a box with its micro-batch number; the legend;
// idle time.
func TestSimSVGContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "zbv.svg")
	cliMust(t, "sim", "-schedule", "zbv", "-ranks", "4", "-micro", "8", "-svg", path)
	b, _ := os.ReadFile(path)
	s := string(b)
	for _, want := range []string{
		">zbv</text>", "P=4 V=2 M=8", "bubble 5.9%", "peak activations 8",
		">rank 0</text>", ">rank 3</text>", ">idle</text>", ">F forward</text>", ">I input grad</text>", ">W weight grad</text>",
		"first stage", ">time</text>",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	// 4 ranks x 2 stages x 8 micro-batches x (F, I, W) boxes, each labelled;
	// transfers, data loads and the optimizer step take no time at the
	// default cost and are not drawn.
	if n := strings.Count(s, "<title>rank "); n != 4*2*8*3 {
		t.Errorf("%d boxes with tooltips, want %d compute boxes", n, 4*2*8*3)
	}
	if n := strings.Count(s, `pointer-events="none">`); n < 4*2*8*3 {
		t.Errorf("%d micro-batch labels, want one per compute box (%d)", n, 4*2*8*3)
	}
}

// TestSimCompareTable pins the comparison table of every family at P=8,
// M=32, and requires docs/visual.md to show exactly this output.
func TestSimCompareTable(t *testing.T) {
	out := cliMust(t, "sim", "-compare", compareAll, "-ranks", "8", "-micro", "32")
	cliGolden(t, "testdata/compare_p8_m32.txt", []byte(out))
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 2+11+1 {
		t.Fatalf("%d lines, want header, column names, 11 rows and the footnote:\n%s", len(lines), out)
	}
	doc, err := os.ReadFile("../../docs/visual.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), out) {
		t.Errorf("docs/visual.md does not show the current output of `ppgen sim -compare ... -ranks 8 -micro 32`:\n%s", out)
	}
}

// TestSimCompareJSON checks the JSON form of a comparison.
func TestSimCompareJSON(t *testing.T) {
	out := cliMust(t, "sim", "-compare", "1f1b,interleaved:3,zbv", "-ranks", "4", "-micro", "8", "-json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, out)
	}
	want := []struct {
		name    string
		virtual float64
	}{{"1f1b", 1}, {"interleaved", 3}, {"zbv", 2}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		r := rows[i]
		if r["schedule"] != w.name || r["virtual"] != w.virtual || r["stages"] != 4*w.virtual {
			t.Errorf("row %d: %v", i, r)
		}
		for _, k := range []string{"makespan", "bubble", "bubble_span", "peak_activations", "busy", "activation_memory"} {
			if _, ok := r[k]; !ok {
				t.Errorf("row %d lacks %q", i, k)
			}
		}
	}
	// Normalized costs: the same work per schedule (ΣBusy = P·M·(F+B) = 4·8·3).
	for i, r := range rows {
		sum := 0.0
		for _, b := range r["busy"].([]any) {
			sum += b.(float64)
		}
		if sum < 96-1e-9 || sum > 96+1e-9 {
			t.Errorf("row %d: total busy %v, want 96 (costs are per rank's share of the model)", i, sum)
		}
	}
}

// TestSimErrors: bad input exits 2 with a one-line reason and writes no file.
func TestSimErrors(t *testing.T) {
	dir := t.TempDir()
	svg := filepath.Join(dir, "x.svg")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-compare", "1f1b,zbv", "-schedule", "zbv", "-ranks", "4", "-micro", "8"}, "drop -schedule"},
		{[]string{"-compare", "1f1b,zbv", "-virtual", "2", "-ranks", "4", "-micro", "8"}, "NAME:V"},
		{[]string{"-compare", "1f1b,nope", "-ranks", "4", "-micro", "8"}, `unknown schedule "nope"`},
		{[]string{"-compare", "auto,1f1b", "-ranks", "4", "-micro", "8"}, `-compare: "auto": auto cannot be one of the compared schedules; use -schedule auto`},
		{[]string{"-compare", "1f1b,zbv:x", "-ranks", "4", "-micro", "8"}, "NAME:V"},
		{[]string{"-compare", ",", "-ranks", "4", "-micro", "8"}, "list of schedules"},
		{[]string{"-compare", "1f1b,zbv:3", "-ranks", "4", "-micro", "8"}, "virtual = 3"},
		{[]string{"-compare", "1f1b,zbv", "-ranks", "4", "-micro", "8", "-cost", "F=1:2:3:4"}, "per-stage lists"},
		{[]string{"-compare", "1f1b", "-ranks", "0", "-micro", "8"}, "ranks = 0"},
		{[]string{"-schedule", "zbv", "-ranks", "4", "-micro", "8", "-svg", "-"}, "-svg needs a file name"},
		{[]string{"-schedule", "zbv", "-ranks", "4", "-micro", "8", "-svg-width", "10"}, "-svg-width"},
		{[]string{"-schedule", "zbv", "-ranks", "4", "-micro", "8", "-cost", "F=x"}, "F"},
		{[]string{"-schedule", "zbv", "-ranks", "4", "-micro", "8", "-svg", filepath.Join(notDir(t, dir), "x.svg")}, "not a directory"},
	} {
		args := append([]string{"sim"}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "-svg ") {
			args = append(args, "-svg", svg)
		}
		code, stdout, errs := cliRun(t, args...)
		if code != 2 || stdout != "" || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", tc.args, code, stdout, errs, tc.want)
		}
		cliNoFile(t, svg)
	}
}

// TestSimJSONEndsInOneNewline: sim -json and sim -compare -json print their
// JSON and one newline, no blank line after it.
func TestSimJSONEndsInOneNewline(t *testing.T) {
	for _, args := range [][]string{
		{"sim", "-schedule", "1f1b", "-ranks", "2", "-micro", "2", "-json"},
		{"sim", "-compare", "1f1b,zbv", "-ranks", "2", "-micro", "4", "-json"},
	} {
		out := cliMust(t, args...)
		if !strings.HasSuffix(out, "\n") || strings.HasSuffix(out, "\n\n") {
			t.Errorf("ppgen %s: output ends in %q, want one newline", strings.Join(args, " "), out[max(0, len(out)-8):])
		}
	}
}
