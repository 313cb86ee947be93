package metrics

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/pipe"
)

var nan = math.NaN()

func sample() []Record {
	return []Record{
		{Step: 0, Loss: nan, EvalLoss: 4.7, LR: nan, GradNorm: nan, TokensPerSec: nan, StepSeconds: nan, Bubble: nan},
		{Step: 1, Loss: 4.6, EvalLoss: nan, LR: 3e-5, GradNorm: 12.5, TokensPerSec: 81234.5, StepSeconds: 0.0625, Bubble: 0.25, Tokens: 4096},
		{Step: 2, Loss: 4.1, EvalLoss: 3.6, LR: 6e-5, GradNorm: math.Inf(1), TokensPerSec: 1e6, StepSeconds: 1e-3, Bubble: 0.1875, Tokens: 8192},
		{Step: 3, Loss: math.Inf(-1), EvalLoss: nan, LR: 1.0000000000000002e-4, GradNorm: 0, TokensPerSec: 0, StepSeconds: 0, Bubble: 0, Tokens: 1 << 40},
	}
}

// same compares records, NaN equal to NaN and to ±Inf (both are null).
func same(a, b Record) bool {
	eq := func(x, y float64) bool { return x == y || !finite(x) && !finite(y) }
	return a.Step == b.Step && a.Tokens == b.Tokens && eq(a.Loss, b.Loss) && eq(a.EvalLoss, b.EvalLoss) && eq(a.LR, b.LR) &&
		eq(a.GradNorm, b.GradNorm) && eq(a.TokensPerSec, b.TokensPerSec) && eq(a.StepSeconds, b.StepSeconds) && eq(a.Bubble, b.Bubble)
}

// TestWriteGolden: the lines are the documented ones, field for field and
// byte for byte.
func TestWriteGolden(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, r := range sample() {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	want := `{"step":0,"loss":null,"eval_loss":4.7,"lr":null,"grad_norm":null,"tokens_per_s":null,"step_s":null,"bubble":null,"tokens":0}
{"step":1,"loss":4.6,"eval_loss":null,"lr":3e-05,"grad_norm":12.5,"tokens_per_s":81234.5,"step_s":0.0625,"bubble":0.25,"tokens":4096}
{"step":2,"loss":4.1,"eval_loss":3.6,"lr":6e-05,"grad_norm":null,"tokens_per_s":1e+06,"step_s":0.001,"bubble":0.1875,"tokens":8192}
{"step":3,"loss":null,"eval_loss":null,"lr":0.00010000000000000002,"grad_norm":0,"tokens_per_s":0,"step_s":0,"bubble":0,"tokens":1099511627776}
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	// Every line is valid JSON with the fields in the documented order.
	for i, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		d := json.NewDecoder(strings.NewReader(l))
		var keys []string
		if _, err := d.Token(); err != nil {
			t.Fatal(err)
		}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
			keys = append(keys, k.(string))
			var v any
			if err := d.Decode(&v); err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
		}
		if got := strings.Join(keys, " "); got != "step loss eval_loss lr grad_norm tokens_per_s step_s bubble tokens" {
			t.Errorf("line %d: fields %s", i+1, got)
		}
	}
	if err := w.Write(Record{Step: -1}); err == nil {
		t.Error("a negative step was written")
	}
}

func TestReadRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, r := range sample() {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	// CRLF, blank lines and unknown fields are fine.
	b.WriteString("\r\n   \n" + `{"step":9,"future_field":[1,2],"loss":1.5}` + "\r\n")
	got, err := ReadAll(&b)
	if err != nil {
		t.Fatal(err)
	}
	want := append(sample(), Record{Step: 9, Loss: 1.5, EvalLoss: nan, LR: nan, GradNorm: nan, TokensPerSec: nan, StepSeconds: nan, Bubble: nan})
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !same(got[i], want[i]) {
			t.Errorf("record %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestReadRejects(t *testing.T) {
	long := `{"step":1,"loss":` + strings.Repeat("1", MaxLine) + "}"
	for _, c := range []struct {
		in, want string
	}{
		{"[1,2]\n", "line 1: not a JSON object"},
		{"\n\n{\"loss\":1}\n", "line 3: no step"},
		{`{"step":-2}`, "line 1: step -2"},
		{`{"step":1,"tokens":-5}`, "tokens -5"},
		{`{"step":1.5}`, "line 1: json"},
		{`{"step":"1"}`, "line 1: json"},
		{`{"step":1,"loss":"x"}`, "line 1: json"},
		{`{"step":1,"loss":1e999}`, "line 1: json"},
		{`{"step":1}` + "\n" + `{"step":2`, "line 2: unexpected end"},
		{`{"step":1}` + "\n" + long + "\n", fmt.Sprintf("line 2: over %d bytes", MaxLine)},
	} {
		_, err := ReadAll(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40q: got %v, want an error with %q", c.in, err, c.want)
		}
	}
	// A line of exactly MaxLine bytes is read.
	exact := `{"step":1,"loss":1` + strings.Repeat(" ", MaxLine-len(`{"step":1,"loss":1}`)) + "}"
	if len(exact) != MaxLine {
		t.Fatalf("line of %d bytes", len(exact))
	}
	if _, err := ReadAll(strings.NewReader(exact)); err != nil {
		t.Errorf("a line of MaxLine bytes: %v", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteError(t *testing.T) {
	if err := NewWriter(failWriter{}).Write(Record{Step: 4}); err == nil || !strings.Contains(err.Error(), "writing step 4: disk full") {
		t.Errorf("got %v", err)
	}
}

// TestSVG: the loss curve read from records is well-formed XML, an <svg>
// with a polyline per curve holding a point per training step and per
// evaluation, and labels.
func TestSVG(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSVG(&b, sample(), SVGOptions{Title: "a <b>", YLabel: "nats"}); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&b)
	var polylines []int
	texts := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if e.Name.Local == "polyline" {
				for _, a := range e.Attr {
					if a.Name.Local == "points" {
						polylines = append(polylines, len(strings.Fields(a.Value)))
					}
				}
			}
		case xml.CharData:
			texts += string(e) + "|"
		}
	}
	// Training losses: steps 1 and 2 (step 3's is -Inf); validation: 0 and 2.
	if fmt.Sprint(polylines) != "[2 2]" {
		t.Errorf("polylines of %v points; want [2 2]", polylines)
	}
	for _, want := range []string{"a <b>", "nats", "training step", "training loss", "validation loss"} {
		if !strings.Contains(texts, want) {
			t.Errorf("no text %q in %s", want, texts)
		}
	}
	if err := WriteSVG(io.Discard, []Record{{Step: 1, Loss: nan, EvalLoss: nan}}, SVGOptions{}); err == nil {
		t.Error("records without a finite loss drew a curve")
	}
}

func TestBubble(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	events := []pipe.TimelineEvent{
		{Rank: 0, Kind: 'F', Start: at(0), End: at(30)},
		{Rank: 0, Kind: 'I', Start: at(20), End: at(50)}, // overlaps the F: counted once
		{Rank: 0, Kind: 'W', Start: at(70), End: at(80)},
		{Rank: 1, Kind: 'F', Start: at(40), End: at(100)},
		{Rank: 2, Kind: 'F', Start: at(5), End: at(5)}, // empty
	}
	busy := Busy(events, []int{0, 1, 2})
	if fmt.Sprint(busy) != "[60ms 60ms 0s]" {
		t.Errorf("busy %v", busy)
	}
	if got := Bubble(100*time.Millisecond, busy[:2]); math.Abs(got-0.4) > 1e-15 {
		t.Errorf("bubble %v, want 0.4", got)
	}
	if !math.IsNaN(Bubble(0, busy)) || !math.IsNaN(Bubble(time.Second, nil)) {
		t.Error("bubble of no time or no rank is not NaN")
	}
}
