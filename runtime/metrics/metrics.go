// Package metrics writes and reads a training job's step records: one JSON
// object per line (JSONL), one line per optimizer step, to a file or
// stdout, for a person to read, a plot (WriteSVG: the loss curve) or a
// dashboard to follow. The format is documented in docs/metrics.md.
//
// # Format
//
// Every line is one object with these fields, always all of them, in this
// order:
//
//	step          optimizer steps taken, this one included (1 for the first; 0 for a record before training, e.g. an evaluation of the initial model)
//	loss          the step's training loss (the mean over its batch)
//	eval_loss     the validation loss measured after the step
//	lr            the learning rate the step used
//	grad_norm     the global gradient norm before clipping
//	tokens_per_s  tokens (or samples) per second over the step
//	step_s        the step's wall time, in seconds
//	bubble        the measured bubble fraction of the step: 1 - busy/(ranks·step_s), busy the ranks' compute time
//	tokens        tokens (or samples) seen since the start of training, this step's included
//
// step and tokens are integers (0 or more). The others are JSON numbers
// written with the fewest digits that read back to the same float64
// (strconv's 'g', -1), or null: null stands for NaN, +Inf and -Inf (not a
// finite number, or not measured: eval_loss on a step without evaluation,
// grad_norm without clipping), and reads back as NaN. The writer never
// refuses a record for a non-finite value, so a diverging run still leaves
// its trace.
//
// The reader takes lines of at most MaxLine bytes, skips empty lines,
// ignores fields it does not know (a later version may add some; it never
// renames or retypes one) and refuses a line that is not a JSON object, a
// field of the wrong type, a missing step, a negative step or tokens,
// naming the line.
package metrics

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Record is one step's metrics. A float field that is NaN or infinite is
// written as null; Read returns NaN for null.
type Record struct {
	Step         int64
	Loss         float64
	EvalLoss     float64
	LR           float64
	GradNorm     float64
	TokensPerSec float64
	StepSeconds  float64
	Bubble       float64
	Tokens       int64
}

// MaxLine bounds a line the Reader accepts, in bytes (its newline
// excluded). A written record is far shorter (under 300 bytes).
const MaxLine = 4096

// AppendRecord appends r's line, newline included, to dst. It refuses a
// negative Step or Tokens.
func AppendRecord(dst []byte, r Record) ([]byte, error) {
	if r.Step < 0 || r.Tokens < 0 {
		return dst, fmt.Errorf("metrics: step %d, tokens %d: want 0 or more", r.Step, r.Tokens)
	}
	dst = append(dst, `{"step":`...)
	dst = strconv.AppendInt(dst, r.Step, 10)
	for _, f := range []struct {
		key string
		v   float64
	}{
		{`,"loss":`, r.Loss}, {`,"eval_loss":`, r.EvalLoss}, {`,"lr":`, r.LR}, {`,"grad_norm":`, r.GradNorm},
		{`,"tokens_per_s":`, r.TokensPerSec}, {`,"step_s":`, r.StepSeconds}, {`,"bubble":`, r.Bubble},
	} {
		dst = append(dst, f.key...)
		dst = appendFloat(dst, f.v)
	}
	dst = append(dst, `,"tokens":`...)
	dst = strconv.AppendInt(dst, r.Tokens, 10)
	return append(dst, "}\n"...), nil
}

func appendFloat(dst []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

// Writer writes records to an io.Writer, one line per Write call (a
// single Write of the underlying writer, so lines of concurrent jobs
// appending to one file do not interleave within a line).
type Writer struct {
	w   io.Writer
	buf []byte
}

// NewWriter returns a Writer to w (a file, os.Stdout).
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes r's line.
func (w *Writer) Write(r Record) error {
	b, err := AppendRecord(w.buf[:0], r)
	if err != nil {
		return err
	}
	w.buf = b
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("metrics: writing step %d: %w", r.Step, err)
	}
	return nil
}

// Reader reads the records of a JSONL stream.
type Reader struct {
	s    *bufio.Scanner
	line int
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 512), MaxLine+1) // +1: a final line's \r
	return &Reader{s: s}
}

// Read returns the next record, or io.EOF after the last one. An error
// names the line.
func (r *Reader) Read() (Record, error) {
	for r.s.Scan() {
		r.line++
		line := bytes.TrimRight(r.s.Bytes(), "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if len(line) > MaxLine {
			return Record{}, fmt.Errorf("metrics: line %d: over %d bytes", r.line, MaxLine)
		}
		rec, err := parse(line)
		if err != nil {
			return Record{}, fmt.Errorf("metrics: line %d: %w", r.line, err)
		}
		return rec, nil
	}
	if err := r.s.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Record{}, fmt.Errorf("metrics: line %d: over %d bytes", r.line+1, MaxLine)
		}
		return Record{}, fmt.Errorf("metrics: after line %d: %w", r.line, err)
	}
	return Record{}, io.EOF
}

// ReadAll reads every record of r.
func ReadAll(r io.Reader) ([]Record, error) {
	rd := NewReader(r)
	var out []Record
	for {
		rec, err := rd.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}

// line is a record as JSON gives it: a nil pointer for null or absent.
type line struct {
	Step         *int64   `json:"step"`
	Loss         *float64 `json:"loss"`
	EvalLoss     *float64 `json:"eval_loss"`
	LR           *float64 `json:"lr"`
	GradNorm     *float64 `json:"grad_norm"`
	TokensPerSec *float64 `json:"tokens_per_s"`
	StepSeconds  *float64 `json:"step_s"`
	Bubble       *float64 `json:"bubble"`
	Tokens       *int64   `json:"tokens"`
}

func parse(b []byte) (Record, error) {
	if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' {
		return Record{}, errors.New("not a JSON object")
	}
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return Record{}, err
	}
	if l.Step == nil {
		return Record{}, errors.New("no step")
	}
	r := Record{Step: *l.Step, Loss: orNaN(l.Loss), EvalLoss: orNaN(l.EvalLoss), LR: orNaN(l.LR), GradNorm: orNaN(l.GradNorm),
		TokensPerSec: orNaN(l.TokensPerSec), StepSeconds: orNaN(l.StepSeconds), Bubble: orNaN(l.Bubble)}
	if l.Tokens != nil {
		r.Tokens = *l.Tokens
	}
	if r.Step < 0 || r.Tokens < 0 {
		return Record{}, fmt.Errorf("step %d, tokens %d: want 0 or more", r.Step, r.Tokens)
	}
	return r, nil
}

func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}
