package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// progress reports a long command's progress on stderr (lowering a large
// schedule, -schedule auto's search and its syntheses, a partition,
// simulating several schedules, rendering a trace).
//
// On a terminal it draws a one-line progress bar, once the work has taken
// longer than progressDelay, erased when the work is done:
//
//	ppgen sim  [#########...........]  2/5  lowering zbv  1.4s
//
// Elsewhere (a CI log, a file, go generate) it logs a line through log/slog
// every progressEvery (PPGEN_PROGRESS), with what is done and left:
//
//	time=... level=INFO msg="ppgen sim: working" done=2 left=3 phase="lowering zbv" elapsed=10s
//
// so work that ends sooner writes nothing. A nil *progress is valid and does
// nothing: newProgress returns one when PPGEN_PROGRESS is off.
type progress struct {
	w     io.Writer
	label string
	total int // units of work; 0: unknown (the bar shows phases only)
	start time.Time
	delay time.Duration
	now   func() time.Time
	// log, when set, makes this a log progress: a line on each tick, no
	// bar.
	log *slog.Logger

	mu    sync.Mutex
	done  int
	phase string
	drawn bool // a line is on the screen
	ended bool // Done ran: draw nothing more
	width int  // length of the last line drawn
	stop  chan struct{}
	wg    sync.WaitGroup
}

const (
	progressDelay   = 300 * time.Millisecond // nothing is drawn before
	progressTick    = 100 * time.Millisecond // redraw period (elapsed time)
	progressBar     = 24                     // bar width in cells
	progressMaxLine = 79                     // longest line drawn (no wrapping on 80 columns)
)

// isTerminal reports whether w is a terminal: a character device other than
// the null device (golang.org/x/term is not in the module graph; this is its
// portable approximation), unless TERM is "dumb".
func isTerminal(w io.Writer) bool {
	if u, ok := w.(interface{ Unwrap() io.Writer }); ok {
		w = u.Unwrap() // run's checkedWriter
	}
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	if fi.Mode()&os.ModeCharDevice == 0 || os.Getenv("TERM") == "dumb" {
		return false
	}
	// /dev/null is a character device too, but nobody watches it.
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}

// progressEnv sets the period of the progress lines written where stderr is
// not a terminal: a duration of at least minProgressEvery ("30s"), or off.
const progressEnv = "PPGEN_PROGRESS"

const (
	progressEvery    = 5 * time.Second // default period of the progress lines
	minProgressEvery = time.Second
)

// progressPeriod reads PPGEN_PROGRESS: the period of the progress lines,
// or 0 when it is off. A value that is neither is warned about, once per
// command, and the default applies.
func progressPeriod() time.Duration {
	v := strings.TrimSpace(os.Getenv(progressEnv))
	switch v {
	case "":
		return progressEvery
	case "off", "0":
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < minProgressEvery {
		slog.Warn(fmt.Sprintf("%s=%.40q is not a duration of at least %v, nor off; progress lines every %v", progressEnv, v, minProgressEvery, progressEvery))
		return progressEvery
	}
	return d
}

// newProgress starts reporting the progress of total units of work
// labelled label ("ppgen sim") on w: a bar when w is a terminal, else a log
// line every PPGEN_PROGRESS (nil when that is off).
func newProgress(w io.Writer, label string, total int) *progress {
	if isTerminal(w) {
		return startProgress(w, label, total, progressDelay, time.Now)
	}
	every := progressPeriod()
	if every == 0 {
		return nil
	}
	t := time.NewTicker(every)
	log := slog.New(slog.NewTextHandler(w, nil))
	return startProgressLog(log, label, total, t.C, t.Stop, time.Now)
}

// startProgressLog starts a log progress: a line to log for each tick of
// ticks until Done, which then calls stopTicks (nil: none). Tests drive it
// with a channel of their own and a fake clock.
func startProgressLog(log *slog.Logger, label string, total int, ticks <-chan time.Time, stopTicks func(), now func() time.Time) *progress {
	p := &progress{label: label, total: total, start: now(), now: now, log: log, stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if stopTicks != nil {
			defer stopTicks()
		}
		for {
			select {
			case <-p.stop:
				return
			case <-ticks:
				p.mu.Lock()
				p.logLine()
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// logLine logs where the work stands. p.mu is held.
func (p *progress) logLine() {
	if p.ended {
		return
	}
	args := []any{}
	if p.total > 0 {
		args = append(args, "done", p.done, "left", p.total-p.done)
	}
	if p.phase != "" {
		args = append(args, "phase", p.phase)
	}
	args = append(args, "elapsed", p.now().Sub(p.start).Round(time.Second).String())
	p.log.Info(p.label+": working", args...)
}

// startProgress starts a bar on w unconditionally (tests use it with a
// buffer and a fake clock); it redraws every progressTick until Done.
func startProgress(w io.Writer, label string, total int, delay time.Duration, now func() time.Time) *progress {
	p := &progress{w: w, label: label, total: total, start: now(), delay: delay, now: now, stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(progressTick)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.mu.Lock()
				p.draw()
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// Phase names the work now under way ("lowering zbv"); the bar shows it.
func (p *progress) Phase(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase = fmt.Sprintf(format, args...)
	p.draw()
}

// Count sets the units of work done and in all (-schedule auto's steps).
func (p *progress) Count(done, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.total = max(done, 0), max(total, 0)
	p.done = min(p.done, p.total)
	p.draw()
}

// Step marks one unit of work done.
func (p *progress) Step() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done < p.total {
		p.done++
	}
	p.draw()
}

// Done stops the progress: a bar's line is erased, leaving the terminal as
// it was; a log progress logs no more. It is safe to call more than once.
func (p *progress) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	p.ended = true
	close(p.stop)
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r"+strings.Repeat(" ", p.width)+"\r")
		p.drawn = false
	}
}

// draw writes the current bar when the delay has passed (a log progress
// writes on its ticks only). p.mu is held.
func (p *progress) draw() {
	if p.log != nil {
		return
	}
	elapsed := p.now().Sub(p.start)
	if p.ended || elapsed < p.delay {
		return
	}
	line := p.line(elapsed)
	pad := ""
	if n := p.width - len(line); n > 0 {
		pad = strings.Repeat(" ", n) // erase what the longer last line left
	}
	fmt.Fprint(p.w, "\r"+line+pad)
	p.drawn, p.width = true, len(line)
}

// line renders the bar: label, bar (when the total is known), count, phase
// and elapsed seconds, at most progressMaxLine bytes (the phase is cut).
func (p *progress) line(elapsed time.Duration) string {
	head := p.label
	if p.total > 0 {
		fill := p.done * progressBar / p.total
		head += fmt.Sprintf("  [%s%s]  %d/%d", strings.Repeat("#", fill), strings.Repeat(".", progressBar-fill), p.done, p.total)
	}
	tail := fmt.Sprintf("  %.1fs", elapsed.Seconds())
	phase := p.phase
	if room := progressMaxLine - len(head) - len(tail) - 2; len(phase) > room {
		phase = phase[:max(room-3, 0)] + "..."
	}
	if phase != "" {
		head += "  " + phase
	}
	return head + tail
}
