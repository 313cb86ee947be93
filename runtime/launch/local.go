package launch

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// LocalOptions configures Local. The zero value is usable.
type LocalOptions struct {
	// Stdout and Stderr receive the ranks' output, each line prefixed with
	// "[rank N] ", and Stderr the launcher's "[launch] ..." status lines.
	// Default os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// Env is added to the launcher's environment for every rank ("K=V").
	Env []string
	// Dir is the ranks' working directory (default: the launcher's).
	Dir string
	// Port is MASTER_PORT; 0 picks a free port.
	Port int
	// Token is PPGEN_TOKEN; "" uses the launcher's PPGEN_TOKEN or a random one.
	Token string
	// Grace is how long the other ranks may take to exit on their own after
	// one fails (or after ctx is canceled and they were interrupted) before
	// they are killed. Default 10 s.
	Grace time.Duration
	// Logger receives lifecycle logs. Default: discard.
	Logger *slog.Logger
}

// RankError reports the rank whose failure ended a Local run.
type RankError struct {
	Rank int
	Err  error // e.g. *exec.ExitError ("exit status 3"), or a start failure
}

func (e *RankError) Error() string { return fmt.Sprintf("launch: rank %d failed: %v", e.Rank, e.Err) }

// Unwrap returns the underlying error.
func (e *RankError) Unwrap() error { return e.Err }

// Local runs n processes of cmd on this machine as ranks 0..n-1 of one job,
// with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
// MASTER_PORT and PPGEN_TOKEN set. Every line a rank prints is prefixed with
// "[rank N] ". Each rank's exit is reported on Stderr. When a rank fails, the
// others get opts.Grace to exit on their own, then are killed (with their
// process groups), and Local returns a *RankError naming the first rank that
// failed. When ctx is canceled, the ranks are interrupted, killed after the
// grace period, and Local returns ctx's error.
func Local(ctx context.Context, n int, cmd []string, opts LocalOptions) error {
	if n < 1 {
		return fmt.Errorf("launch: %d ranks, want at least 1", n)
	}
	if len(cmd) == 0 {
		return errors.New("launch: empty command")
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.Grace <= 0 {
		opts.Grace = 10 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	port := opts.Port
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return fmt.Errorf("launch: pick a free port: %w", err)
		}
		port = p
	}
	token := opts.Token
	if token == "" {
		token = os.Getenv(TokenVar)
	}
	if token == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		token = hex.EncodeToString(b)
	}

	var mu sync.Mutex // serializes whole lines across ranks and streams
	status := &prefixWriter{mu: &mu, w: opts.Stderr, prefix: []byte("[launch] ")}
	report := func(format string, args ...any) {
		fmt.Fprintf(status, format+"\n", args...)
	}

	type exit struct {
		rank int
		err  error
	}
	exits := make(chan exit, n)
	procs := make([]*exec.Cmd, n)
	alive := make([]bool, n)
	base := append(os.Environ(), opts.Env...)
	for r := range n {
		c := exec.Command(cmd[0], cmd[1:]...)
		c.Dir = opts.Dir
		c.Env = append(base[:len(base):len(base)],
			"RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r),
			"WORLD_SIZE="+strconv.Itoa(n), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			TokenVar+"="+token)
		prefix := []byte(fmt.Sprintf("[rank %d] ", r))
		stdout := &prefixWriter{mu: &mu, w: opts.Stdout, prefix: prefix}
		stderr := &prefixWriter{mu: &mu, w: opts.Stderr, prefix: prefix}
		c.Stdout, c.Stderr = stdout, stderr
		c.WaitDelay = time.Second // do not wait forever for grandchildren holding the pipes
		setProcessGroup(c)
		if err := c.Start(); err != nil {
			for q := range r {
				signalGroup(procs[q], true)
			}
			for range r {
				<-exits
			}
			return &RankError{Rank: r, Err: fmt.Errorf("start %q: %w", cmd[0], err)}
		}
		procs[r], alive[r] = c, true
		log.Debug("rank started", "rank", r, "pid", c.Process.Pid)
		go func() {
			err := c.Wait()
			stdout.flush()
			stderr.flush()
			exits <- exit{r, err}
		}()
	}
	report("started %d ranks of %q (MASTER_ADDR=127.0.0.1 MASTER_PORT=%d)", n, cmd[0], port)

	var result error
	var deadline <-chan time.Time
	killed := false
	for running := n; running > 0; {
		select {
		case e := <-exits:
			running--
			alive[e.rank] = false
			switch {
			case e.err == nil:
				report("rank %d exited with status 0", e.rank)
			case killed:
				report("rank %d killed (%v)", e.rank, e.err)
			default:
				report("rank %d failed: %v", e.rank, e.err)
			}
			if e.err != nil && result == nil {
				result = &RankError{Rank: e.rank, Err: e.err}
				if running > 0 {
					report("waiting up to %v for the other ranks to exit, then killing them", opts.Grace)
					deadline = time.After(opts.Grace)
				}
			}
		case <-deadline:
			deadline = nil
			killed = true
			for r, c := range procs {
				if alive[r] {
					signalGroup(c, true)
				}
			}
		case <-ctx.Done():
			if result == nil {
				result = fmt.Errorf("launch: %w", ctx.Err())
				report("canceled: interrupting the ranks")
				for r, c := range procs {
					if alive[r] {
						signalGroup(c, false)
					}
				}
				deadline = time.After(opts.Grace)
			}
			ctx = context.Background() // handled; keep waiting for the exits
		}
	}
	return result
}

// freePort asks the kernel for a free TCP port on the loopback.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// prefixWriter writes complete lines to w, each preceded by prefix, holding
// mu per line so lines of different ranks never interleave.
type prefixWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix []byte
	buf    []byte
}

const maxLine = 64 << 10

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			if len(p.buf) >= maxLine {
				p.emit(p.buf, true)
				p.buf = p.buf[:0]
			}
			return len(b), nil
		}
		p.emit(p.buf[:i+1], false)
		p.buf = p.buf[i+1:]
	}
}

func (p *prefixWriter) emit(line []byte, addNewline bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.w.Write(p.prefix)
	p.w.Write(line)
	if addNewline {
		p.w.Write([]byte{'\n'})
	}
}

// flush writes a final unterminated line, if any.
func (p *prefixWriter) flush() {
	if len(p.buf) > 0 {
		p.emit(p.buf, true)
		p.buf = nil
	}
}
