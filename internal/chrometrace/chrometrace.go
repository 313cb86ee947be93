// Package chrometrace writes Chrome trace-event files (the JSON object form
// that Perfetto, ui.perfetto.dev, and chrome://tracing load). Both the
// simulated timeline (gen/sim, `ppgen trace`) and the measured one
// (runtime/pipe.Timeline) are written by it; it imports only the standard
// library, so either side of the gen/runtime rule may use it.
//
// An [Event] is one trace event; pointer fields are written only when set,
// so a zero time can be written ("ts":0) or left out. [File.Write] writes
// one event per line; [File.WriteCompact] writes the whole file on one line.
// [Read] reads either back, within [Limits] (gen/tune fits a model to a
// measured trace with it).
package chrometrace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// The event phases used here.
const (
	Complete  = "X" // a slice with ts and dur
	Metadata  = "M" // process and thread names and sort order
	FlowStart = "s" // the start of an arrow between slices
	FlowEnd   = "f" // its end (with BP "e": bound to the enclosing slice)
)

// Event is one entry of the trace-event format. The field order fixes the
// byte order of the output.
type Event struct {
	Name string   `json:"name"`
	Cat  string   `json:"cat,omitempty"`
	Ph   string   `json:"ph"`
	Pid  int      `json:"pid"`
	Tid  int      `json:"tid"`
	Ts   *float64 `json:"ts,omitempty"`  // µs
	Dur  *float64 `json:"dur,omitempty"` // µs
	ID   *int     `json:"id,omitempty"`  // flow id
	BP   string   `json:"bp,omitempty"`
	// Args is what a writer puts there (a map, a struct); an event Read
	// returns holds the args' JSON text (json.RawMessage), decoded on
	// demand by ArgMap, so a trace of a million events keeps its bytes,
	// not a million maps.
	Args any `json:"args,omitempty"`
}

// ArgMap returns e's args as a JSON object decodes into an any: e.Args
// itself when it is a map[string]any, the decoding of its text when Read
// left the JSON (json.RawMessage). ok is false when there are none, or
// when they are not a JSON object.
func (e Event) ArgMap() (m map[string]any, ok bool) {
	switch a := e.Args.(type) {
	case map[string]any:
		return a, true
	case json.RawMessage:
		if err := json.Unmarshal(a, &m); err != nil || m == nil {
			return nil, false
		}
		return m, true
	}
	return nil, false
}

type nameArgs struct {
	Name string `json:"name"`
}

type sortArgs struct {
	SortIndex int `json:"sort_index"`
}

// ProcessName names process pid.
func ProcessName(pid int, name string) Event {
	return Event{Name: "process_name", Ph: Metadata, Pid: pid, Args: nameArgs{name}}
}

// ProcessSortIndex places process pid at position i.
func ProcessSortIndex(pid, i int) Event {
	return Event{Name: "process_sort_index", Ph: Metadata, Pid: pid, Args: sortArgs{i}}
}

// ThreadName names thread tid of process pid.
func ThreadName(pid, tid int, name string) Event {
	return Event{Name: "thread_name", Ph: Metadata, Pid: pid, Tid: tid, Args: nameArgs{name}}
}

// ThreadSortIndex places thread tid of process pid at position i.
func ThreadSortIndex(pid, tid, i int) Event {
	return Event{Name: "thread_sort_index", Ph: Metadata, Pid: pid, Tid: tid, Args: sortArgs{i}}
}

// Float returns a pointer to v, for Event.Ts and Event.Dur.
func Float(v float64) *float64 { return &v }

// Int returns a pointer to v, for Event.ID.
func Int(v int) *int { return &v }

// File is a trace: the events and the file-level fields.
type File struct {
	DisplayTimeUnit string // "ms" or "ns"
	OtherData       any    // free-form metadata, shown by the viewers
	Events          []Event
}

// Write writes f without HTML escaping, one event per line:
//
//	{"displayTimeUnit":"ms",
//	"otherData":{...},
//	"traceEvents":[
//	{...},
//	{...}
//	]}
func (f File) Write(w io.Writer) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	line := func(v any) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
		return nil
	}
	buf.WriteString(`{"displayTimeUnit":`)
	if err := line(f.DisplayTimeUnit); err != nil {
		return fmt.Errorf("chrometrace: %w", err)
	}
	buf.WriteString(",\n\"otherData\":")
	if err := line(f.OtherData); err != nil {
		return fmt.Errorf("chrometrace: otherData: %w", err)
	}
	buf.WriteString(",\n\"traceEvents\":[\n")
	for i := range f.Events {
		if err := line(&f.Events[i]); err != nil {
			return fmt.Errorf("chrometrace: event %d %q: %w", i, f.Events[i].Name, err)
		}
		if i < len(f.Events)-1 {
			buf.WriteByte(',')
		}
		buf.WriteByte('\n')
	}
	buf.WriteString("]}\n")
	_, err := w.Write(buf.Bytes())
	return err
}

// WriteCompact writes f on one line, as encoding/json's Encoder writes it
// (HTML escaped, traceEvents first), followed by a newline.
func (f File) WriteCompact(w io.Writer) error {
	doc := struct {
		TraceEvents     []Event `json:"traceEvents"`
		DisplayTimeUnit string  `json:"displayTimeUnit"`
		OtherData       any     `json:"otherData"`
	}{f.Events, f.DisplayTimeUnit, f.OtherData}
	if doc.TraceEvents == nil {
		doc.TraceEvents = []Event{}
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(doc); err != nil {
		return fmt.Errorf("chrometrace: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}
