package chrometrace

import (
	"bytes"
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

// Read reads a trace in the JSON object form both writers produce
// ({"traceEvents": [...], "displayTimeUnit": ..., "otherData": ...}, in
// either layout; other top-level keys are skipped). It reads at most
// lim.Bytes and stops at the lim.Events+1-th event instead of decoding them
// all first. An event's Args decode as encoding/json decodes into an any
// (numbers as float64); its Ts and Dur are as written (nil when absent):
// checking their values is the caller's part.
func Read(r io.Reader, lim Limits) (File, error) {
	data, err := io.ReadAll(io.LimitReader(r, lim.Bytes+1))
	if err != nil {
		return File{}, fmt.Errorf("chrometrace: %w", err)
	}
	if int64(len(data)) > lim.Bytes {
		return File{}, fmt.Errorf("chrometrace: the file is over %d bytes", lim.Bytes)
	}
	const want = `want a Chrome trace {"traceEvents": [...]}`
	var f File
	dec := json.NewDecoder(bytes.NewReader(data))
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
				var e Event
				if err := dec.Decode(&e); err != nil {
					return File{}, fmt.Errorf("chrometrace: event %d: %w", len(f.Events), err)
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
			var other any
			if err := dec.Decode(&other); err != nil {
				return File{}, fmt.Errorf("chrometrace: otherData: %w", err)
			}
			f.OtherData = other
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
