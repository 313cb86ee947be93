package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// errDiskFull stands for the error of a full disk or a closed pipe.
var errDiskFull = errors.New("disk full")

// failingWriter accepts its first n bytes, then fails every write with
// errDiskFull: stdout or stderr on a full disk.
type failingWriter struct {
	n   int
	buf bytes.Buffer
}

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.buf.Len()+len(b) <= w.n {
		return w.buf.Write(b)
	}
	k := w.n - w.buf.Len()
	w.buf.Write(b[:k])
	return k, errDiskFull
}

// TestWriteErrors: every command whose output cannot be written exits 2
// with a line on stderr naming the stream and the error, whether the write
// fails at once or after some output, and whether the command checks its
// writes or not (run's checkedWriter does).
func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(csv, []byte("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sched := []string{"-schedule", "zbv", "-ranks", "2", "-micro", "4"}
	with := func(args ...string) []string { return append(args, sched...) }
	tests := []struct {
		name string
		args []string
	}{
		{"sim", with("sim")},
		{"sim -json", with("sim", "-json")},
		{"sim -grid", with("sim", "-grid")},
		{"sim -compare", []string{"sim", "-compare", "1f1b,zbv", "-ranks", "2", "-micro", "4"}},
		{"verify", with("verify")},
		{"show", with("show")},
		{"show -format csv", with("show", "-format", "csv")},
		{"export", with("export", "-to", "torch-csv")},
		{"trace", with("trace")},
		{"gen -o -", with("gen", "-package", "p", "-o", "-")},
		{"import", []string{"import", "-from", "torch-csv", csv}},
		{"list", []string{"list"}},
		{"version", []string{"version"}},
		{"template", []string{"template", "-kind", "slurm", "-ranks", "2", "--", "./trainer"}},
		{"help", []string{"help"}},
		{"-h", []string{"-h"}},
		{"help sim", []string{"help", "sim"}},
		{"verify -h", []string{"verify", "-h"}},
	}
	for _, tc := range tests {
		for _, n := range []int{0, 16} { // fail at once, or after 16 bytes
			var stderr bytes.Buffer
			stdout := &failingWriter{n: n}
			code := run(tc.args, stdout, &stderr)
			want := "writing stdout: " + errDiskFull.Error()
			if code != 2 || !strings.Contains(stderr.String(), want) {
				t.Errorf("%s, stdout failing after %d bytes: exit %d, stderr %q; want exit 2 and %q", tc.name, n, code, stderr.String(), want)
			}
		}
	}

	// A report on stderr that cannot be written fails too (the file is
	// written).
	for _, tc := range []struct {
		name string
		args func(out string) []string
	}{
		{"export -o", func(o string) []string { return with("export", "-to", "torch-csv", "-o", o) }},
		{"gen -o", func(o string) []string { return with("gen", "-package", "p", "-o", o) }},
		{"import -o - (report on stderr)", func(string) []string { return []string{"import", "-from", "torch-csv", csv, "-o", "-"} }},
	} {
		var stdout bytes.Buffer
		code := run(tc.args(filepath.Join(dir, "out")), &stdout, &failingWriter{})
		if code != 2 {
			t.Errorf("%s with stderr failing: exit %d; want 2", tc.name, code)
		}
	}

	// The same commands with working streams exit 0.
	for _, tc := range tests {
		if code, _, stderr := cliRun(t, tc.args...); code != 0 {
			t.Errorf("%s: exit %d: %s", tc.name, code, stderr)
		}
	}
}

// TestCheckedWriter: the first error is kept (a short write is one), later
// writes write nothing and return it, and concurrent writes are safe.
func TestCheckedWriter(t *testing.T) {
	tests := []struct {
		name    string
		limit   int
		writes  []string
		wantOut string
		wantErr string
	}{
		{"all written", 100, []string{"ab", "cd"}, "abcd", ""},
		{"fails at once", 0, []string{"ab", "cd"}, "", "writing stdout: disk full"},
		{"fails midway", 3, []string{"ab", "cd", "ef"}, "abc", "writing stdout: disk full"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fw := &failingWriter{n: tc.limit}
			c := &checkedWriter{name: "stdout", w: fw}
			for _, s := range tc.writes {
				c.Write([]byte(s))
			}
			if got := fw.buf.String(); got != tc.wantOut {
				t.Errorf("written %q; want %q", got, tc.wantOut)
			}
			err := c.Err()
			if got := errString(err); got != tc.wantErr {
				t.Errorf("Err() = %q; want %q", got, tc.wantErr)
			}
			if err != nil && !errors.Is(err, errDiskFull) {
				t.Errorf("Err() = %v does not wrap the writer's error", err)
			}
		})
	}
	t.Run("short write", func(t *testing.T) {
		c := &checkedWriter{name: "stderr", w: shortWriter{}}
		if _, err := c.Write([]byte("abc")); err == nil || c.Err() == nil || !strings.Contains(c.Err().Error(), "writing stderr: short write") {
			t.Errorf("short write: Write error %v, Err %v; want writing stderr: short write", err, c.Err())
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		var buf bytes.Buffer
		c := &checkedWriter{name: "stdout", w: &buf}
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					c.Write([]byte("x"))
				}
			}()
		}
		wg.Wait()
		if buf.Len() != 800 || c.Err() != nil {
			t.Errorf("8×100 concurrent writes: %d bytes, Err %v; want 800 and nil", buf.Len(), c.Err())
		}
	})
}

// shortWriter writes one byte of each write and returns no error.
type shortWriter struct{}

func (shortWriter) Write(b []byte) (int, error) { return min(len(b), 1), nil }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
