package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestProgressHiddenWhenNotTerminal: a buffer, a regular file and the null
// device are not terminals, so long commands draw no bar there (a log
// progress instead, TestProgressLog; none with PPGEN_PROGRESS=off).
func TestProgressHiddenWhenNotTerminal(t *testing.T) {
	var buf bytes.Buffer
	t.Setenv(progressEnv, "")
	p := newProgress(&buf, "x", 3)
	if p == nil || p.log == nil {
		t.Error("no log progress on a bytes.Buffer")
	}
	p.Done()
	t.Setenv(progressEnv, "off")
	if p := newProgress(&buf, "x", 3); p != nil {
		t.Errorf("a progress on a bytes.Buffer with %s=off", progressEnv)
	}
	if buf.Len() != 0 {
		t.Errorf("wrote %q", buf.String())
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a regular file is a terminal")
	}
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		if isTerminal(null) {
			t.Error("the null device is a terminal")
		}
		null.Close()
	}
	// Nil bars do nothing, and do not panic.
	p = nil
	p.Phase("x %d", 1)
	p.Step()
	p.Count(1, 2)
	p.Done()

	// A long simulation and a comparison write only their reports.
	for _, args := range [][]string{
		{"sim", "-schedule", "interleaved", "-ranks", "16", "-virtual", "4", "-micro", "256"},
		{"sim", "-compare", "1f1b,zbv", "-ranks", "8", "-micro", "64"},
		{"trace", "-schedule", "zbv", "-ranks", "8", "-micro", "64", "-o", filepath.Join(t.TempDir(), "t.json")},
	} {
		var out bytes.Buffer
		stderr := &slowWriter{}
		if code := run(args, &out, stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		if s := stderr.String(); strings.ContainsAny(s, "\r#") {
			t.Errorf("%v wrote a progress bar to a non-terminal stderr: %q", args, s)
		}
	}
}

// slowWriter is a safe buffer (not a terminal).
type slowWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *slowWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *slowWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestProgressDraws drives a bar with a fake clock: nothing before the
// delay, then a bar with count, phase and elapsed time, kept to one
// terminal line, erased by Done.
func TestProgressDraws(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(0, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	w := &slowWriter{}
	p := startProgress(w, "ppgen sim", 4, progressDelay, clock)
	p.Phase("lowering zbv")
	p.Step()
	if w.String() != "" {
		t.Fatalf("drew before the delay: %q", w.String())
	}
	advance(time.Second)
	p.Step()
	got := w.String()
	want := "\rppgen sim  [############............]  2/4  lowering zbv  1.0s"
	if !strings.HasSuffix(got, want) {
		t.Errorf("bar = %q, want suffix %q", got, want)
	}
	p.Phase("%s", strings.Repeat("a very long phase name ", 10))
	lines := strings.Split(w.String(), "\r")
	if last := lines[len(lines)-1]; len(strings.TrimRight(last, " ")) > progressMaxLine || !strings.Contains(last, "...") {
		t.Errorf("long line not cut to %d: %q", progressMaxLine, last)
	}
	p.Done()
	p.Done() // idempotent
	s := w.String()
	if !strings.HasSuffix(s, "\r") || strings.TrimRight(s[strings.LastIndex(s[:len(s)-1], "\r")+1:], "\r ") != "" {
		t.Errorf("Done did not erase the line: %q", s[max(0, len(s)-120):])
	}
	n := len(w.String())
	p.Step()
	p.Phase("after")
	if len(w.String()) != n {
		t.Error("a finished bar still draws")
	}
}

// TestProgressUnknownTotal: without a total the bar shows the phase and time.
func TestProgressUnknownTotal(t *testing.T) {
	p := &progress{label: "ppgen trace", phase: "simulating 404 steps"}
	if got, want := p.line(2500*time.Millisecond), "ppgen trace  simulating 404 steps  2.5s"; got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
}
