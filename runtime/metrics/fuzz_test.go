package metrics

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzReader: the reader never panics, whatever the bytes, and every record
// it accepts writes back to a line that reads back to the same record.
// The seed corpus is testdata/fuzz/FuzzReader plus the lines below.
func FuzzReader(f *testing.F) {
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, r := range sample() {
		if err := w.Write(r); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(b.Bytes())
	f.Add([]byte(`{"step":1}`))
	f.Add([]byte("{\"step\":2,\"loss\":null,\"x\":{\"y\":[1,2,{}]}}\r\n\n{\"step\":3}"))
	f.Add([]byte(`{"step":1,"tokens":-1}`))
	f.Add([]byte(`{"step":1,"lr":1e-400,"bubble":-0}`))
	f.Add([]byte(strings.Repeat("{", MaxLine+2)))
	f.Fuzz(func(t *testing.T, in []byte) {
		recs, _ := ReadAll(bytes.NewReader(in)) // the records before an error
		for _, r := range recs {
			line, err := AppendRecord(nil, r)
			if err != nil {
				t.Fatalf("read %+v, which does not write: %v", r, err)
			}
			if len(line) > MaxLine {
				t.Fatalf("a record's line is %d bytes", len(line))
			}
			back, err := ReadAll(bytes.NewReader(line))
			if err != nil || len(back) != 1 || !same(back[0], r) {
				t.Fatalf("%+v wrote %q, read back %+v, %v", r, line, back, err)
			}
		}
	})
}
