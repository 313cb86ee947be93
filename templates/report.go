package templates

import (
	"bytes"
	"fmt"
	htmltemplate "html/template"
)

// Report is what the HTML report of a schedule shows. The strings are
// escaped as HTML text except SVG, which is inserted as it is: it must come
// from ppgen's own SVG renderer (gen/sim.SVG).
type Report struct {
	Title       string // e.g. "zbv, P=4, M=8"
	Command     string // the invocation that wrote the report
	Schedule    string
	Ranks       int
	Stages      int
	Virtual     int
	Micro       int
	Placement   string
	Passes      string // the lowering passes that ran, comma-separated
	Fingerprint string

	Steps, Transfers int
	Cost             string // the cost model in ParseCost form
	Makespan         string
	Bubble           string
	BubbleSpan       string
	HasFSDP          bool
	Rows             []ReportRow
	SVG              string // the timeline, an <svg> element
	Program          string // the lowered program in text form
}

// ReportRow is one rank's line of the report.
type ReportRow struct {
	Rank            int
	Stages          string
	Steps           int
	Busy, Idle      string
	PeakActivations int
	Slots           int
	PeakUnsharded   int
}

// RenderReport renders the HTML report: a single self-contained page (inline
// style and SVG, no scripts), deterministic for the same Report.
func RenderReport(r Report) ([]byte, error) {
	if r.Ranks < 1 || len(r.Rows) != r.Ranks {
		return nil, fmt.Errorf("report: %d rows for %d ranks; want one row per rank", len(r.Rows), r.Ranks)
	}
	t, err := htmltemplate.New(reportFile).Funcs(htmltemplate.FuncMap{}).ParseFS(files, reportFile)
	if err != nil {
		return nil, err
	}
	data := struct {
		Report
		SVG htmltemplate.HTML
	}{r, htmltemplate.HTML(r.SVG)} // #nosec: ppgen's own SVG
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return b.Bytes(), nil
}
