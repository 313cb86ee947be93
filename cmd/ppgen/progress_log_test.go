package main

import (
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/gencmd"
)

// TestMain turns the progress lines off for this package's tests, whose
// commands' stderr is not a terminal: a command slowed down past
// PPGEN_PROGRESS's period on a busy machine would otherwise add a line to
// the output they compare. Tests of the progress set it themselves.
func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv(progressEnv); !ok {
		os.Setenv(progressEnv, "off")
	}
	os.Exit(m.Run())
}

// lineWriter hands each line written to it to its channel, so that a test
// waits for a line instead of sleeping.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

// testLogger is a slog text logger on w without the time, which a fake
// clock does not set.
func testLogger(w lineWriter) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
}

// TestProgressLog drives a log progress (stderr not a terminal) with ticks
// of its own and a fake clock: nothing when the work ends before the first
// tick; else a line per tick with what is done and left, the phase and the
// time, and nothing after Done, which stops the ticker.
func TestProgressLog(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(0, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	line := func(lines lineWriter) string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second): // only when a tick logged nothing
			t.Fatal("no line for a tick")
			return ""
		}
	}

	// Work done before the first tick writes nothing.
	lines := make(lineWriter, 8)
	ticks := make(chan time.Time)
	stopped := false
	p := startProgressLog(testLogger(lines), "ppgen sim", 4, ticks, func() { stopped = true }, clock)
	p.Phase("lowering zbv")
	p.Step()
	p.Done()
	if len(lines) != 0 || !stopped {
		t.Errorf("quick work: %d lines, ticker stopped %v; want none, true", len(lines), stopped)
	}

	// Long work: a line per tick.
	stopped = false
	p = startProgressLog(testLogger(lines), "ppgen sim", 4, ticks, func() { stopped = true }, clock)
	p.Phase("lowering zbv")
	p.Step()
	advance(5 * time.Second)
	ticks <- now
	if got, want := line(lines), `level=INFO msg="ppgen sim: working" done=1 left=3 phase="lowering zbv" elapsed=5s`+"\n"; got != want {
		t.Errorf("first line %q, want %q", got, want)
	}
	p.Step()
	p.Phase("simulating")
	advance(5 * time.Second)
	ticks <- now
	if got, want := line(lines), `level=INFO msg="ppgen sim: working" done=2 left=2 phase=simulating elapsed=10s`+"\n"; got != want {
		t.Errorf("second line %q, want %q", got, want)
	}
	p.Done()
	p.Step()
	p.Phase("after")
	select {
	case ticks <- now:
		t.Error("a finished progress still takes ticks")
	default:
	}
	if len(lines) != 0 || !stopped {
		t.Errorf("after Done: %d lines, ticker stopped %v", len(lines), stopped)
	}

	// Unknown total: the phase and the time. -schedule auto's steps count
	// as done and left (showAuto).
	p = startProgressLog(testLogger(lines), "ppgen partition", 0, ticks, nil, clock)
	p.Phase("splitting the layers of m.json")
	ticks <- now
	if got, want := line(lines), `level=INFO msg="ppgen partition: working" phase="splitting the layers of m.json" elapsed=0s`+"\n"; got != want {
		t.Errorf("unknown total: %q, want %q", got, want)
	}
	p.Done()
	p = startProgressLog(testLogger(lines), "ppgen gen", 0, ticks, nil, clock)
	req := &gencmd.Request{Schedule: auto.Name}
	showAuto(req, p)
	req.AutoProgress("building zbv", 3, 20)
	ticks <- now
	if got, want := line(lines), `level=INFO msg="ppgen gen: working" done=3 left=17 phase="auto: building zbv" elapsed=0s`+"\n"; got != want {
		t.Errorf("auto: %q, want %q", got, want)
	}
	p.Done()
}

// TestProgressPeriod: PPGEN_PROGRESS sets the period of the lines, or
// turns them off; anything else keeps the default (with a warning).
func TestProgressPeriod(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
	}{
		{"", progressEvery},
		{"off", 0},
		{"0", 0},
		{"30s", 30 * time.Second},
		{" 2m ", 2 * time.Minute},
		{"10ms", progressEvery},
		{"-5s", progressEvery},
		{"soon", progressEvery},
	} {
		t.Setenv(progressEnv, tc.env)
		if got := progressPeriod(); got != tc.want {
			t.Errorf("%s=%q: %v, want %v", progressEnv, tc.env, got, tc.want)
		}
	}
	t.Setenv(progressEnv, "")
	var b strings.Builder
	if p := newProgress(&b, "x", 1); p == nil || p.log == nil {
		t.Error("no log progress by default on a non-terminal")
	} else {
		p.Done()
	}
}
