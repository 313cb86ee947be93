package ir

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// FormatText writes the program one rank per line: "rank 0: 0F0 0SEND_F0 ...".
func FormatText(p Program) string {
	var b strings.Builder
	for r, steps := range p.Ranks {
		b.WriteString("rank ")
		b.WriteString(strconv.Itoa(r))
		b.WriteByte(':')
		for _, s := range steps {
			b.WriteByte(' ')
			s.appendTo(&b)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// ParseText parses the form FormatText writes. Lines may omit the "rank N:"
// prefix (then they are ranks in order); blank lines and lines starting with
// '#' are skipped. The placement and micro-batch count are inferred (see Infer);
// Copies is left 0 (one pipeline), the text form does not carry it.
func ParseText(text string) (Program, error) {
	var rows [][]Step
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "rank ") {
			colon := strings.IndexByte(line, ':')
			if colon < 0 {
				return Program{}, &ParseError{Line: n + 1, Text: line, Reason: `want "rank N: step step ..."`}
			}
			r, err := strconv.Atoi(strings.TrimSpace(line[5:colon]))
			if err != nil || r != len(rows) {
				return Program{}, &ParseError{Line: n + 1, Text: line, Reason: fmt.Sprintf("want rank %d next", len(rows))}
			}
			line = line[colon+1:]
		}
		var steps []Step
		for c, f := range strings.Fields(line) {
			st, err := ParseStep(f)
			if err != nil {
				return Program{}, atCell(err, n+1, c+1)
			}
			steps = append(steps, st)
		}
		rows = append(rows, steps)
	}
	return Infer(rows)
}

// FormatCSV writes the program in the CSV form torch.distributed.pipelining
// dumps and loads: one row per rank, one action per cell.
func FormatCSV(p Program) []byte {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	for _, steps := range p.Ranks {
		row := make([]string, len(steps))
		for i, s := range steps {
			row[i] = s.String()
		}
		_ = w.Write(row) // writes to a bytes.Buffer cannot fail
	}
	w.Flush()
	return buf.Bytes()
}

// ParseCSV reads the CSV form: one row per rank, one action per cell, an empty
// cell is idle time and is dropped. The placement and micro-batch count are
// inferred (see Infer); ResolvePeers is applied when the rows hold transfers.
// Copies is left 0 (one pipeline), the CSV form does not carry it.
func ParseCSV(r io.Reader) (Program, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	records, err := cr.ReadAll()
	if err != nil {
		return Program{}, fmt.Errorf("reading schedule CSV: %w", err)
	}
	rows := make([][]Step, len(records))
	for n, rec := range records {
		for c, cell := range rec {
			cell = strings.TrimSpace(cell)
			if cell == "" || cell == "None" {
				continue
			}
			st, err := ParseStep(cell)
			if err != nil {
				return Program{}, atCell(err, n+1, c+1)
			}
			rows[n] = append(rows[n], st)
		}
	}
	return Infer(rows)
}

func atCell(err error, line, col int) error {
	if pe, ok := err.(*ParseError); ok {
		pe.Line, pe.Column = line, col
		return pe
	}
	return err
}

// Infer builds a Program from per-rank step rows: the number of stages is one
// more than the largest stage named, each stage is placed on the rank whose
// row runs its compute (named "loop" or "v" when the table is one of those),
// and M is one more than the largest micro-batch named. Peers of transfers
// are resolved from that placement. Copies is left 0 (one pipeline).
func Infer(rows [][]Step) (Program, error) {
	if len(rows) == 0 {
		return Program{}, fmt.Errorf("schedule has no ranks (no non-empty rows)")
	}
	maxStage, maxMicro := -1, -1
	var visit func(s Step)
	visit = func(s Step) {
		maxStage = max(maxStage, s.Stage)
		maxMicro = max(maxMicro, s.Micro)
		for _, sub := range s.Sub {
			visit(sub)
		}
	}
	for _, steps := range rows {
		for _, s := range steps {
			visit(s)
		}
	}
	if maxStage < 0 {
		return Program{}, fmt.Errorf("schedule names no stage")
	}
	rankOf := make([]int, maxStage+1)
	for i := range rankOf {
		rankOf[i] = None
	}
	for r, steps := range rows {
		for i, s := range steps {
			for _, c := range append(s.Computes(), s) {
				// Transfers and loads do not place a stage: an mpipe owner
				// loads and ships the input of a stage on another rank.
				if c.Stage < 0 || c.Kind.IsComm() || c.Kind == DataLoad {
					continue
				}
				if rankOf[c.Stage] != None && rankOf[c.Stage] != r {
					return Program{}, fmt.Errorf("rank %d step %d %s: stage %d also runs on rank %d; a stage lives on one rank", r, i, s, c.Stage, rankOf[c.Stage])
				}
				rankOf[c.Stage] = r
			}
		}
	}
	for s, r := range rankOf {
		if r == None {
			return Program{}, fmt.Errorf("stage %d has no compute step on any rank; stages must be numbered 0..%d without gaps", s, maxStage)
		}
	}
	pl, err := Table(len(rows), rankOf)
	if err != nil {
		return Program{}, err
	}
	pl.Name = classify(pl)
	p := Program{Placement: pl, Micro: maxMicro + 1, Ranks: rows}
	if err := p.ResolvePeers(); err != nil {
		return Program{}, err
	}
	return p, nil
}

// classify names a placement table "loop" or "v" when it is one of those.
func classify(p Placement) string {
	n := p.Ranks()
	if len(p.RankOf)%n == 0 {
		loop := Loop(n, len(p.RankOf)/n)
		if equalInts(loop.RankOf, p.RankOf) {
			return "loop"
		}
	}
	if len(p.RankOf) == 2*n && equalInts(VShape(n).RankOf, p.RankOf) {
		return "v"
	}
	return "table"
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
