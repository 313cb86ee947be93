package chrometrace

import (
	"bytes"
	"math"
	"testing"
)

// TestWrite pins both layouts byte for byte on hand-written files.
func TestWrite(t *testing.T) {
	evs := []Event{
		ProcessName(0, "rank 0"),
		ThreadSortIndex(0, 1, 1),
		{Name: "0F0", Cat: "compute", Ph: Complete, Pid: 0, Ts: Float(0), Dur: Float(1.5), Args: map[string]any{"b": 1, "a": "x<y"}},
		{Name: "a -> b", Cat: "flow", Ph: FlowEnd, BP: "e", Pid: 1, Tid: 1, Ts: Float(2), ID: Int(0)},
	}
	other := map[string]string{"schedule": "s&t"}
	cases := []struct {
		name    string
		f       File
		compact bool
		want    string
	}{
		{"lines", File{DisplayTimeUnit: "ms", OtherData: other, Events: evs}, false,
			"{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"schedule\":\"s&t\"},\n\"traceEvents\":[\n" +
				`{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}},` + "\n" +
				`{"name":"thread_sort_index","ph":"M","pid":0,"tid":1,"args":{"sort_index":1}},` + "\n" +
				`{"name":"0F0","cat":"compute","ph":"X","pid":0,"tid":0,"ts":0,"dur":1.5,"args":{"a":"x<y","b":1}},` + "\n" +
				`{"name":"a -> b","cat":"flow","ph":"f","pid":1,"tid":1,"ts":2,"id":0,"bp":"e"}` + "\n]}\n"},
		{"lines, no events", File{DisplayTimeUnit: "ns"}, false,
			"{\"displayTimeUnit\":\"ns\",\n\"otherData\":null,\n\"traceEvents\":[\n]}\n"},
		{"compact", File{DisplayTimeUnit: "ms", OtherData: other, Events: evs[2:3]}, true,
			`{"traceEvents":[{"name":"0F0","cat":"compute","ph":"X","pid":0,"tid":0,"ts":0,"dur":1.5,"args":{"a":"x\u003cy","b":1}}],"displayTimeUnit":"ms","otherData":{"schedule":"s\u0026t"}}` + "\n"},
		{"compact, no events", File{DisplayTimeUnit: "ms"}, true,
			`{"traceEvents":[],"displayTimeUnit":"ms","otherData":null}` + "\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			write := tc.f.Write
			if tc.compact {
				write = tc.f.WriteCompact
			}
			if err := write(&b); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestWriteRefusesNaN: a non-finite time is an error naming the event, and
// nothing is written.
func TestWriteRefusesNaN(t *testing.T) {
	f := File{DisplayTimeUnit: "ms", Events: []Event{{Name: "bad", Ph: Complete, Ts: Float(math.NaN())}}}
	for _, write := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return f.Write(b) },
		func(b *bytes.Buffer) error { return f.WriteCompact(b) },
	} {
		var b bytes.Buffer
		if err := write(&b); err == nil || b.Len() != 0 {
			t.Errorf("err %v, wrote %q; want an error and nothing written", err, b.String())
		}
	}
	var b bytes.Buffer
	if err := f.Write(&b); err == nil || !bytes.Contains([]byte(err.Error()), []byte(`"bad"`)) {
		t.Errorf("error %v does not name the event", err)
	}
}
