package ir

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// FormatText writes the program one rank per line: "rank 0: 0F0 0SEND_F0 ...".
func FormatText(p Program) string {
	var b []byte
	for r, steps := range p.Ranks {
		b = strconv.AppendInt(append(b, "rank "...), int64(r), 10)
		b = append(b, ':')
		for _, s := range steps {
			b = s.AppendText(append(b, ' '))
		}
		b = append(b, '\n')
	}
	return string(b)
}

// ParseText parses the form FormatText writes (see ReadText).
func ParseText(text string) (Program, error) { return ReadText(strings.NewReader(text)) }

// ReadText reads the form FormatText writes. Lines may omit the "rank N:"
// prefix (then they are ranks in order); blank lines and lines starting
// with '#' are skipped. The placement, micro-batch count and model copies
// are inferred (see Infer). It reads as it parses and stops at the first
// error, so input of any size costs at most the limits' worth of memory: a
// line is at most MaxLineBytes, a step MaxStepBytes, the program MaxSteps
// steps on at most MaxIndex+1 ranks, each number at most MaxIndex. Its
// errors are *ParseError (with the line and step) or *LimitError.
func ReadText(r io.Reader) (Program, error) {
	var rows [][]Step
	lr := newLineReader(r)
	steps := 0
	for {
		raw, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Program{}, err
		}
		n := lr.line
		line := strings.TrimSpace(string(raw))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "rank ") {
			colon := strings.IndexByte(line, ':')
			if colon < 0 {
				return Program{}, &ParseError{Line: n, Text: line, Reason: `want "rank N: step step ..."`}
			}
			r, err := strconv.Atoi(strings.TrimSpace(line[5:colon]))
			if err != nil || r != len(rows) {
				return Program{}, &ParseError{Line: n, Text: line, Reason: fmt.Sprintf("want rank %d next", len(rows))}
			}
			line = line[colon+1:]
		}
		if len(rows) > MaxIndex {
			return Program{}, &ParseError{Line: n, Text: line, Reason: (&LimitError{What: "ranks", Value: int64(len(rows)) + 1, Min: 1, Max: MaxIndex + 1}).Error()}
		}
		var row []Step
		c := 0
		for f := range strings.FieldsSeq(line) {
			c++
			st, err := parseCell(f, n, c, &steps)
			if err != nil {
				return Program{}, err
			}
			row = append(row, st)
		}
		rows = append(rows, row)
	}
	return Infer(rows)
}

// parseCell parses one step of a file at line n, cell (or word) c, counting
// it in *steps against MaxSteps.
func parseCell(cell string, n, c int, steps *int) (Step, error) {
	if len(cell) > MaxStepBytes {
		return Step{}, &ParseError{Line: n, Column: c, Text: cell, Reason: fmt.Sprintf("a step is at most %d bytes long, this one %d", MaxStepBytes, len(cell))}
	}
	if *steps++; *steps > MaxSteps {
		return Step{}, &ParseError{Line: n, Column: c, Text: cell, Reason: (&LimitError{What: "steps", Value: int64(*steps), Min: 1, Max: MaxSteps, Hint: "the program is larger than any ppgen lowers"}).Error() + " after this one"}
	}
	st, err := ParseStep(cell)
	if err != nil {
		return Step{}, atCell(err, n, c)
	}
	return st, nil
}

// lineReader reads a file line by line (without the line ending), refusing
// a line over MaxLineBytes before reading more of it.
type lineReader struct {
	br   *bufio.Reader
	buf  []byte
	line int // 1-based number of the line last returned
}

func newLineReader(r io.Reader) *lineReader { return &lineReader{br: bufio.NewReaderSize(r, 64<<10)} }

// next returns the next line, valid until the following call; io.EOF at
// the end.
func (lr *lineReader) next() ([]byte, error) {
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.br.ReadSlice('\n')
		if len(lr.buf)+len(chunk) > MaxLineBytes {
			head := append(lr.buf[:min(len(lr.buf), maxQuote):min(len(lr.buf), maxQuote)], chunk[:min(len(chunk), maxQuote)]...)
			return nil, &ParseError{Line: lr.line + 1, Text: string(head),
				Reason: fmt.Sprintf("the line is longer than %d bytes, the most a schedule line may hold", MaxLineBytes)}
		}
		lr.buf = append(lr.buf, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(lr.buf) > 0:
			return lr.firstLine(lr.buf), nil
		case err != nil && err != io.EOF:
			return nil, fmt.Errorf("reading the schedule: %w", err)
		case err != nil:
			return nil, err
		}
		b := lr.buf[:len(lr.buf)-1]
		if len(b) > 0 && b[len(b)-1] == '\r' {
			b = b[:len(b)-1]
		}
		return lr.firstLine(b), nil
	}
}

// firstLine counts the line read and drops the UTF-8 byte order mark some
// editors write at the start of a file (first line only, once).
func (lr *lineReader) firstLine(b []byte) []byte {
	lr.line++
	if lr.line == 1 {
		b = bytes.TrimPrefix(b, []byte(bom))
	}
	return b
}

// bom is the UTF-8 byte order mark.
const bom = "\ufeff"

// IsCSV reports whether a schedule file named name (may be "" or "-"),
// whose first bytes are head, is in the CSV form rather than the text form
// FormatText writes. It goes by content first: a file whose first line
// that is neither blank nor a '#' comment starts "rank N:" is the text
// form whatever its name; one whose first such line holds a comma is CSV.
// Otherwise a name ending in ".csv" says CSV. A leading UTF-8 byte order
// mark is skipped. head may be cut anywhere (a peek of the file).
func IsCSV(name string, head []byte) bool {
	head = bytes.TrimPrefix(head, []byte(bom))
	for len(head) > 0 {
		line, rest, _ := bytes.Cut(head, []byte("\n"))
		head = rest
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if hasRankPrefix(string(line)) {
			return false
		}
		if bytes.IndexByte(line, ',') >= 0 {
			return true
		}
		break
	}
	return strings.HasSuffix(strings.ToLower(name), ".csv")
}

// hasRankPrefix reports whether line starts "rank N:", as a line of the
// text form does.
func hasRankPrefix(line string) bool {
	rest, ok := strings.CutPrefix(line, "rank ")
	if !ok {
		return false
	}
	rest = strings.TrimLeft(rest, " \t")
	digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
	return digits > 0 && strings.HasPrefix(strings.TrimLeft(rest[digits:], " \t"), ":")
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
// cell (or "None") is idle time and is dropped; empty lines are skipped. The
// placement, micro-batch count and model copies are inferred (see Infer);
// peers are resolved when the rows hold transfers. It reads row by row and
// stops at the first error, within the limits ReadText keeps. A row holding
// a double quote is read as encoding/csv reads it (TrimLeadingSpace); a
// quoted cell may not span lines (no step holds a line break).
func ParseCSV(r io.Reader) (Program, error) { return ReadCSV(r, CSVOptions{}) }

// CSVOptions adapts ReadCSV to a dialect of the CSV form.
type CSVOptions struct {
	// Cell, when not nil, rewrites each non-empty cell (spaces trimmed)
	// before it is parsed as a step: another release's names, say. An
	// error refuses the cell; ReadCSV reports it with its line and cell.
	Cell func(string) (string, error)
}

// ReadCSV is ParseCSV with the options of a dialect.
func ReadCSV(r io.Reader, opt CSVOptions) (Program, error) {
	var rows [][]Step
	lr := newLineReader(r)
	steps := 0
	for {
		line, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Program{}, err
		}
		n := lr.line
		if len(line) == 0 {
			continue
		}
		if len(rows) > MaxIndex {
			return Program{}, &ParseError{Line: n, Text: string(line[:min(len(line), maxQuote)]), Reason: (&LimitError{What: "ranks (rows)", Value: int64(len(rows)) + 1, Min: 1, Max: MaxIndex + 1}).Error()}
		}
		var row []Step
		cell := func(c int, text string) error {
			text = strings.TrimSpace(text)
			if text == "" || text == "None" {
				return nil
			}
			if opt.Cell != nil && len(text) <= MaxStepBytes {
				var err error
				if text, err = opt.Cell(text); err != nil {
					return &ParseError{Line: n, Column: c, Text: text, Reason: err.Error()}
				}
			}
			st, err := parseCell(text, n, c, &steps)
			if err != nil {
				if pe, ok := err.(*ParseError); ok && c == 1 && hasRankPrefix(text) {
					pe.Reason += `; the file looks like ppgen's text form ("rank N: step step ..."), not CSV: pass it to -in, which reads either form, or convert it with ppgen export -to torch-csv -in FILE`
				}
				return err
			}
			row = append(row, st)
			return nil
		}
		if bytes.IndexByte(line, '"') < 0 {
			rest, c := string(line), 0
			for more := true; more; {
				var f string
				f, rest, more = strings.Cut(rest, ",")
				c++
				if err := cell(c, f); err != nil {
					return Program{}, err
				}
			}
		} else {
			cr := csv.NewReader(bytes.NewReader(line))
			cr.FieldsPerRecord = -1
			cr.TrimLeadingSpace = true
			rec, err := cr.Read()
			if err == nil {
				if _, err2 := cr.Read(); err2 != io.EOF {
					err = errors.New("a quoted cell spans lines; no step holds a line break")
				}
			}
			if err != nil {
				return Program{}, &ParseError{Line: n, Text: string(line[:min(len(line), maxQuote)]), Reason: "not a CSV row: " + err.Error()}
			}
			for c, f := range rec {
				if err := cell(c+1, f); err != nil {
					return Program{}, err
				}
			}
		}
		rows = append(rows, row)
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
// and M is one more than the largest micro-batch named; stages and
// micro-batches must be numbered without gaps. Peers of transfers are
// resolved from that placement. Copies is inferred from the compute steps:
// when the micro-batches split into two equal contiguous halves, each
// computing only its own half of the stages (dualpipe's two model copies),
// Copies is 2; otherwise it is left 0 (one pipeline; runtime/pipe runs at
// most two copies). The shape is
// checked against the limits (CheckSize, MaxSteps) before anything is sized
// by it.
func Infer(rows [][]Step) (Program, error) {
	if len(rows) == 0 {
		return Program{}, fmt.Errorf("schedule has no ranks (no non-empty rows)")
	}
	maxStage, maxMicro, steps := -1, -1, 0
	var visit func(s Step)
	visit = func(s Step) {
		maxStage = max(maxStage, s.Stage)
		maxMicro = max(maxMicro, s.Micro)
		for _, sub := range s.Sub {
			visit(sub)
		}
	}
	for _, row := range rows {
		steps += len(row)
		for _, s := range row {
			visit(s)
		}
	}
	if maxStage < 0 {
		return Program{}, fmt.Errorf("schedule names no stage")
	}
	if maxMicro < 0 {
		return Program{}, fmt.Errorf("schedule names no micro-batch (no F, B, I or W step)")
	}
	if err := CheckSize(len(rows), min(maxStage, MaxIndex+1)+1, min(maxMicro, MaxIndex+1)+1); err != nil {
		return Program{}, fmt.Errorf("schedule: %w", err)
	}
	if steps > MaxSteps {
		return Program{}, fmt.Errorf("schedule: %w", &LimitError{What: "steps", Value: int64(steps), Min: 1, Max: MaxSteps})
	}
	M := maxMicro + 1
	rankOf := make([]int, maxStage+1)
	for i := range rankOf {
		rankOf[i] = None
	}
	// lo[m], hi[m]: the stages micro m computes on, for the copies.
	lo, hi := make([]int, M), make([]int, M)
	for m := range lo {
		lo[m], hi[m] = maxStage+1, -1
	}
	for r, steps := range rows {
		for i, s := range steps {
			for _, c := range append(s.Computes(), s) {
				if c.Kind.IsCompute() && !c.Kind.IsOverlap() && c.Micro >= 0 && c.Stage >= 0 {
					lo[c.Micro], hi[c.Micro] = min(lo[c.Micro], c.Stage), max(hi[c.Micro], c.Stage)
				}
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
	for m := range M {
		if hi[m] < 0 {
			return Program{}, fmt.Errorf("micro-batch %d has no compute step (F, B, I or W) on any rank; micro-batches must be numbered 0..%d without gaps", m, maxMicro)
		}
	}
	pl, err := Table(len(rows), rankOf)
	if err != nil {
		return Program{}, err
	}
	pl.Name = classify(pl)
	p := Program{Placement: pl, Micro: M, Ranks: rows, Copies: inferCopies(maxStage+1, lo, hi)}
	if err := p.ResolvePeers(); err != nil {
		return Program{}, err
	}
	return p, nil
}

// inferCopies returns 2 when the S stages and the micro-batches split into
// two equal contiguous halves, micro m computing exactly the stages of its
// half (Program.Route), and 0 otherwise.
func inferCopies(S int, lo, hi []int) int {
	M := len(lo)
	if M == 0 || lo[0] != 0 || hi[0] >= S-1 {
		return 0
	}
	per := hi[0] + 1
	if S%per != 0 {
		return 0
	}
	C := S / per
	if C != 2 || M%C != 0 {
		return 0 // runtime/pipe runs one or two copies
	}
	for m := range M {
		first := m / (M / C) * per
		if lo[m] != first || hi[m] != first+per-1 {
			return 0
		}
	}
	return C
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
