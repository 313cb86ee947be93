package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress draws a one-line progress bar on stderr while a long command
// runs (lowering a large schedule, simulating several, rendering a trace):
//
//	ppgen sim  [#########...........]  2/5  lowering zbv  1.4s
//
// It draws only when its writer is a terminal, and only once the work has
// taken longer than progressDelay, so quick commands, pipes, files and
// tests see nothing at all. A nil *progress is valid and does nothing,
// which is what newProgress returns in those cases.
type progress struct {
	w     io.Writer
	label string
	total int // units of work; 0: unknown (the bar shows phases only)
	start time.Time
	delay time.Duration
	now   func() time.Time

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

// newProgress starts a progress bar for total units of work labelled label
// ("ppgen sim"), or returns nil when w is not a terminal.
func newProgress(w io.Writer, label string, total int) *progress {
	if !isTerminal(w) {
		return nil
	}
	return startProgress(w, label, total, progressDelay, time.Now)
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

// Done stops the bar and erases its line, leaving the terminal as it was.
// It is safe to call more than once.
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

// draw writes the current line when the delay has passed. p.mu is held.
func (p *progress) draw() {
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
