package chrometrace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Limits bound what Read accepts.
type Limits struct {
	Bytes  int64 // the file
	Events int   // entries of traceEvents
}

// The largest event and otherData Read decodes. An event a writer of this
// package produces is some 150 bytes, its otherData a few names; decoding
// a value into Event.Args or OtherData (encoding/json's any) takes some
// 20 to 40 times its bytes, so a larger one is refused before it is
// decoded rather than allowed to take gigabytes.
const (
	MaxEventBytes = 64 << 10
	MaxOtherBytes = 1 << 20
	// MaxEventValues is the most JSON objects and arrays one event may
	// open (the event itself and its args count): a real event has two
	// or three, and each costs a decoder allocations when its args are
	// read.
	MaxEventValues = 64
)

// containers counts the '{' and '[' of m outside its strings.
func containers(m []byte) int {
	n, in, esc := 0, false, false
	for _, c := range m {
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && (c == '{' || c == '['):
			n++
		}
	}
	return n
}

// event is Event as Read decodes it: the args kept as their JSON text.
type event struct {
	Event
	Args json.RawMessage `json:"args,omitempty"`
}

// Read reads a trace in the JSON object form both writers produce
// ({"traceEvents": [...], "displayTimeUnit": ..., "otherData": ...}, in
// either layout; other top-level keys are skipped). It streams r: it reads at most
// lim.Bytes, stops at the lim.Events+1-th event instead of decoding them
// all first, and refuses an event over MaxEventBytes or an otherData over
// MaxOtherBytes, or opening more than MaxEventValues objects and arrays,
// before decoding it. An event's Args hold the args' JSON text
// (json.RawMessage; Event.ArgMap decodes it, numbers as float64); its Ts
// and Dur are as written (nil when absent):
// checking their values is the caller's part.
func Read(r io.Reader, lim Limits) (File, error) {
	lr := &limitReader{r: r, left: lim.Bytes}
	f, err := read(json.NewDecoder(lr), lim)
	if lr.over {
		return File{}, fmt.Errorf("chrometrace: the file is over %d bytes", lim.Bytes)
	}
	return f, err
}

// limitReader reads r up to left bytes, then fails: unlike
// io.LimitReader, it tells a file over the limit from one that ends there.
type limitReader struct {
	r    io.Reader
	left int64
	over bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		var one [1]byte
		if n, _ := io.ReadFull(l.r, one[:]); n > 0 {
			l.over = true
			return 0, errors.New("over the size limit")
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// raw decodes dec's next value as raw bytes and refuses one over max,
// naming what.
func raw(dec *json.Decoder, max int, what string) (json.RawMessage, error) {
	var m json.RawMessage
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("chrometrace: %s: %w", what, err)
	}
	if len(m) > max {
		return nil, fmt.Errorf("chrometrace: %s is %d bytes, over the limit of %d", what, len(m), max)
	}
	return m, nil
}

func read(dec *json.Decoder, lim Limits) (File, error) {
	const want = `want a Chrome trace {"traceEvents": [...]}`
	var f File
	delim := func(d json.Delim) error {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("chrometrace: %w (%s)", err, want)
		}
		if tok != d {
			return fmt.Errorf("chrometrace: found %v where %q belongs (%s)", clip(tok), d, want)
		}
		return nil
	}
	if err := delim('{'); err != nil {
		return File{}, err
	}
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return File{}, fmt.Errorf("chrometrace: %w", err)
		}
		switch key, _ := tok.(string); key {
		case "traceEvents":
			if seen {
				return File{}, errors.New("chrometrace: traceEvents given twice")
			}
			seen = true
			if err := delim('['); err != nil {
				return File{}, err
			}
			for dec.More() {
				if len(f.Events) == lim.Events {
					return File{}, fmt.Errorf("chrometrace: more than %d events", lim.Events)
				}
				what := fmt.Sprintf("event %d", len(f.Events))
				m, err := raw(dec, MaxEventBytes, what)
				if err != nil {
					return File{}, err
				}
				if n := containers(m); n > MaxEventValues {
					return File{}, fmt.Errorf("chrometrace: %s opens %d JSON objects and arrays, over the limit of %d", what, n, MaxEventValues)
				}
				var w event
				if err := json.Unmarshal(m, &w); err != nil {
					return File{}, fmt.Errorf("chrometrace: %s: %w", what, err)
				}
				e := w.Event
				if len(w.Args) > 0 && string(w.Args) != "null" {
					e.Args = w.Args
				}
				f.Events = append(f.Events, e)
			}
			if err := delim(']'); err != nil {
				return File{}, err
			}
		case "displayTimeUnit":
			if err := dec.Decode(&f.DisplayTimeUnit); err != nil {
				return File{}, fmt.Errorf("chrometrace: displayTimeUnit: %w", err)
			}
		case "otherData":
			m, err := raw(dec, MaxOtherBytes, "otherData")
			if err != nil {
				return File{}, err
			}
			if err := json.Unmarshal(m, &f.OtherData); err != nil {
				return File{}, fmt.Errorf("chrometrace: otherData: %w", err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return File{}, fmt.Errorf("chrometrace: %s: %w", clip(key), err)
			}
		}
	}
	if err := delim('}'); err != nil {
		return File{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return File{}, errors.New("chrometrace: text after the trace's JSON object")
	}
	if !seen {
		return File{}, fmt.Errorf("chrometrace: no traceEvents (%s)", want)
	}
	return f, nil
}

func clip(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
