package chrometrace

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

// TestReadRoundTrip: both layouts read back into the events written.
func TestReadRoundTrip(t *testing.T) {
	f := File{DisplayTimeUnit: "ms", OtherData: map[string]any{"schedule": "1f1b"}, Events: []Event{
		ProcessName(0, "rank 0"),
		{Name: "0F0", Cat: "compute", Ph: Complete, Pid: 1, Tid: 2, Ts: Float(3.5), Dur: Float(1.25), Args: map[string]any{"stage": 0.0, "kind": "F"}},
		{Name: "a -> b", Cat: "flow", Ph: FlowStart, Pid: 1, Ts: Float(2), ID: Int(7)},
	}}
	for _, compact := range []bool{false, true} {
		var b bytes.Buffer
		write := f.Write
		if compact {
			write = f.WriteCompact
		}
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		got, err := Read(&b, Limits{Bytes: 1 << 20, Events: 10})
		if err != nil {
			t.Fatalf("compact %v: %v", compact, err)
		}
		if got.DisplayTimeUnit != "ms" || len(got.Events) != 3 {
			t.Fatalf("compact %v: got %+v", compact, got)
		}
		e := got.Events[1]
		args, _ := e.ArgMap()
		if e.Name != "0F0" || e.Cat != "compute" || e.Ph != Complete || e.Pid != 1 || e.Tid != 2 ||
			e.Ts == nil || *e.Ts != 3.5 || e.Dur == nil || *e.Dur != 1.25 || args["kind"] != "F" || args["stage"] != 0.0 {
			t.Errorf("compact %v: event 1 = %+v", compact, e)
		}
		if e := got.Events[2]; e.ID == nil || *e.ID != 7 || e.Dur != nil {
			t.Errorf("compact %v: event 2 = %+v", compact, e)
		}
		if m, _ := got.OtherData.(map[string]any); m["schedule"] != "1f1b" {
			t.Errorf("compact %v: otherData %v", compact, got.OtherData)
		}
	}
}

// TestReadRefuses: malformed files and files over the limits are errors
// that say what is wrong.
func TestReadRefuses(t *testing.T) {
	lim := Limits{Bytes: 200, Events: 2}
	cases := []struct{ name, in, want string }{
		{"empty", "", "EOF"},
		{"array form", `[{"name":"x","ph":"X"}]`, `found [ where "{" belongs`},
		{"no events", `{"displayTimeUnit":"ms"}`, "no traceEvents"},
		{"twice", `{"traceEvents":[],"traceEvents":[]}`, "given twice"},
		{"not a list", `{"traceEvents":{}}`, `found { where "[" belongs`},
		{"too many", `{"traceEvents":[{"ph":"M"},{"ph":"M"},{"ph":"M"}]}`, "more than 2 events"},
		{"too big", `{"traceEvents":[` + strings.Repeat(" ", 200) + `]}`, "over 200 bytes"},
		{"bad event", `{"traceEvents":[{"pid":"zero"}]}`, "event 0"},
		{"trailing", `{"traceEvents":[]} {}`, "text after"},
		{"unclosed", `{"traceEvents":[{"ph":"M"}`, "EOF"},
		{"event too big", `{"traceEvents":[{"ph":"X","args":{"a":"` + strings.Repeat("x", MaxEventBytes) + `"}}]}`, "event 0 is 65562 bytes, over the limit of 65536"},
		{"event too deep", `{"traceEvents":[{"ph":"X","args":{"a":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}}]}`, "event 0 opens 65 JSON objects and arrays, over the limit of 64"},
		{"otherData too big", `{"traceEvents":[],"otherData":"` + strings.Repeat("x", MaxOtherBytes) + `"}`, "otherData is 1048578 bytes, over the limit of 1048576"},
	}
	big := Limits{Bytes: 4 << 20, Events: 2}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lim := lim
			if len(tc.in) > 1000 {
				lim = big
			}
			_, err := Read(strings.NewReader(tc.in), lim)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one containing %q", err, tc.want)
			}
		})
	}
	// Unknown top-level keys are skipped.
	f, err := Read(strings.NewReader(`{"x":[1,{"y":2}],"traceEvents":[{"ph":"M"}],"z":null}`), lim)
	if err != nil || len(f.Events) != 1 {
		t.Errorf("got %+v, %v; want one event", f, err)
	}
}

// FuzzRead: no input panics or reads past the limits, and what Read
// accepts writes back (WriteCompact) into a file it reads again with as
// many events.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"traceEvents":[{"name":"0F0","cat":"compute","ph":"X","pid":0,"tid":0,"ts":1,"dur":2,"args":{"stage":0,"kind":"F"}}],"displayTimeUnit":"ms","otherData":{"schedule":"1f1b"}}`))
	f.Add([]byte("{\"displayTimeUnit\":\"ms\",\n\"otherData\":null,\n\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"rank 0\"}}\n]}\n"))
	f.Add([]byte(`{"x":[1,2],"traceEvents":[]}`))
	lim := Limits{Bytes: 1 << 16, Events: 64}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Read(bytes.NewReader(in), lim)
		if err != nil {
			return
		}
		if len(got.Events) > lim.Events {
			t.Fatalf("%d events over the limit %d", len(got.Events), lim.Events)
		}
		var b bytes.Buffer
		if err := got.WriteCompact(&b); err != nil {
			return // a value JSON cannot hold back (none expected, but not Read's concern)
		}
		again, err := Read(&b, Limits{Bytes: int64(b.Len()), Events: lim.Events})
		if err != nil || len(again.Events) != len(got.Events) {
			t.Fatalf("written back, read as %d events, %v; want %d\n%s", len(again.Events), err, len(got.Events), b.String())
		}
	})
}

// TestReadKeepsBytesNotValues: the events Read keeps cost about their
// JSON's bytes, however their args nest (within MaxEventValues): an 8 MiB
// trace of events whose args hold 40 arrays each (each one an allocation
// when decoded into an any) keeps under 6× the file, where decoding the
// args took over 20× (a 128 MiB one took 2.6 GB).
func TestReadKeepsBytesNotValues(t *testing.T) {
	ev := `{"name":"0F0","cat":"compute","ph":"X","args":{"a":[` + strings.Repeat("[],", 39) + `[]]}},`
	n := (8 << 20) / len(ev)
	in := `{"traceEvents":[` + strings.Repeat(ev, n-1) + strings.TrimSuffix(ev, ",") + `]}`
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f, err := Read(strings.NewReader(in), Limits{Bytes: int64(len(in)), Events: n})
	if err != nil || len(f.Events) != n {
		t.Fatalf("read %d events, %v; want %d", len(f.Events), err, n)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if kept > 6*int64(len(in)) {
		t.Errorf("%d events of %d bytes keep %d MB: over 6× the %d MB read", n, len(ev), kept>>20, len(in)>>20)
	}
	if m, ok := f.Events[n-1].ArgMap(); !ok || len(m["a"].([]any)) != 40 {
		t.Errorf("the last event's args: %v, %v", m, ok)
	}
	runtime.KeepAlive(f)
}
