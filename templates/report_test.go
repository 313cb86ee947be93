package templates

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func reportFixture() Report {
	return Report{
		Title: "1f1b, P=2, M=2", Command: "ppgen report -schedule 1f1b -ranks 2 -micro 2 -o r.html",
		Schedule: "1f1b", Ranks: 2, Stages: 2, Virtual: 1, Micro: 2, Placement: "loop",
		Passes: "data+comm, opt, slots", Fingerprint: "sha256:00", Steps: 24, Transfers: 8,
		Cost: "F=1,B=2,I=1,W=1", Makespan: "9", Bubble: "33.3%", BubbleSpan: "14.3%",
		Rows: []ReportRow{
			{Rank: 0, Stages: "0", Steps: 12, Busy: "6", Idle: "33.3%", PeakActivations: 2, Slots: 2},
			{Rank: 1, Stages: "1", Steps: 12, Busy: "6", Idle: "33.3%", PeakActivations: 1, Slots: 1},
		},
		SVG:     `<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>`,
		Program: "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n",
	}
}

func TestRenderReportGolden(t *testing.T) {
	got, err := RenderReport(reportFixture())
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "report.golden")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if string(got) != string(want) {
		t.Errorf("report differs from %s:\n%s", golden, got)
	}
}

// TestRenderReportEscapes: text is escaped, the SVG is kept as markup, and
// a report must have one row per rank.
func TestRenderReportEscapes(t *testing.T) {
	r := reportFixture()
	r.Title = `<script>alert(1)</script>`
	got, err := RenderReport(r)
	if err != nil {
		t.Fatal(err)
	}
	s := string(got)
	if strings.Contains(s, "<script>") || !strings.Contains(s, "&lt;script&gt;") {
		t.Errorf("title not escaped:\n%s", s)
	}
	if !strings.Contains(s, `<svg xmlns="http://www.w3.org/2000/svg"`) {
		t.Errorf("SVG not inlined")
	}
	r.Rows = r.Rows[:1]
	if _, err := RenderReport(r); err == nil || !strings.Contains(err.Error(), "1 rows for 2 ranks") {
		t.Errorf("err = %v, want the row count error", err)
	}
}
