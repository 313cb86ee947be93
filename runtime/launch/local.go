package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ppgen/ppgen/runtime/internal/swapdir"
)

// Bounds of Local's inputs. MaxLocal bounds the ranks one machine runs:
// far above its cores or accelerators, low enough that a typo (-n 100000)
// is refused instead of forking the machine to death.
const (
	MaxLocal     = 1024
	MaxGrace     = 10 * time.Minute
	DefaultGrace = 10 * time.Second
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
	// Token is PPGEN_TOKEN; "" uses the launcher's PPGEN_TOKEN or, when that
	// is unset or empty, a new random one (32 hex digits from crypto/rand).
	Token string
	// Grace is how long the other ranks may take to exit on their own after
	// one fails (or after ctx is canceled or a signal is forwarded) before
	// they are killed. 0 means DefaultGrace; at most MaxGrace.
	Grace time.Duration
	// Logger receives lifecycle logs. Default: discard.
	Logger *slog.Logger
}

// RankError reports the rank whose failure ended a Local run, by cause: a
// rank killed or stopped by a signal the launcher did not send (SIGKILL from
// a user or the OOM killer, a crash, SIGSTOP) when there is one, the first
// of them in time; else the rank that failed first in time (a non-zero exit
// or a failed start), not merely the first to be noticed. A killed rank's
// peers exit with errors of their own when they see it die, and the
// launcher may notice those exits before its death: they are its
// consequences. A stopped rank never exits: its peers fail on their
// timeouts, and the launcher, looking at the ranks still running once one
// has exited, finds it stopped (Linux: state T in /proc; see
// stoppedMember), then kills it when the grace period ends, or at once
// when the job is failing and only stopped ranks are left.
// Later lists the other ranks that failed on their own (most often because
// their transports saw Rank fail), Killed those the launcher killed when the
// grace period ran out.
type RankError struct {
	Rank int
	Err  error // e.g. *exec.ExitError ("exit status 3", "signal: killed"), a start failure, errStopped
	// Signaled says that a signal the launcher did not send killed or
	// stopped Rank.
	Signaled bool
	// Stopped says that the signal stopped Rank (SIGSTOP, SIGTSTP) rather
	// than killed it; the launcher killed it once its peers had failed.
	Stopped bool
	Later   []int
	Killed  []int
}

// errStopped is the Err of a RankError whose rank a signal stopped.
var errStopped = errors.New("stopped by a signal (SIGSTOP or SIGTSTP), alive but silent")

func (e *RankError) Error() string {
	s := fmt.Sprintf("launch: rank %d failed: %v", e.Rank, e.Err)
	var more []string
	switch {
	case e.Stopped && len(e.Later) > 0:
		more = append(more, fmt.Sprintf("the first cause; %s failed too, most likely because it stopped answering", ranksList(e.Later)))
	case e.Stopped:
	case e.Signaled && len(e.Later) > 0:
		more = append(more, fmt.Sprintf("killed by a signal, the first cause; %s failed too, most likely because it died", ranksList(e.Later)))
	case e.Signaled:
		more = append(more, "killed by a signal")
	case len(e.Later) > 0:
		more = append(more, fmt.Sprintf("%s failed after it", ranksList(e.Later)))
	}
	if len(e.Killed) > 0 {
		more = append(more, fmt.Sprintf("%s killed after rank %d failed", ranksList(e.Killed), e.Rank))
	}
	if e.Stopped {
		more = append(more, "the launcher killed it")
	}
	if len(more) > 0 {
		s += " (" + strings.Join(more, "; ") + ")"
	}
	return s
}

// Unwrap returns the underlying error.
func (e *RankError) Unwrap() error { return e.Err }

// SignalError is Local's error when the launcher received SIGINT or SIGTERM
// and forwarded it to the ranks.
type SignalError struct{ Signal os.Signal }

func (e *SignalError) Error() string {
	return fmt.Sprintf("launch: received %v; forwarded it to the ranks", e.Signal)
}

func ranksList(rs []int) string {
	rs = slices.Sorted(slices.Values(rs))
	word := "rank"
	if len(rs) > 1 {
		word = "ranks"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r)
	}
	return word + " " + strings.Join(parts, ", ")
}

// Local runs n processes of cmd on this machine as ranks 0..n-1 of one job,
// with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
// MASTER_PORT and PPGEN_TOKEN set. Every line a rank prints is prefixed with
// "[rank N] ". Each rank's exit is reported on Stderr. When a rank fails, the
// others get opts.Grace to exit on their own, then are killed (with their
// process groups), and Local returns a *RankError naming the rank whose
// failure caused the others': the first one a signal killed, else the first
// to fail in time. When ctx is canceled, the ranks are interrupted
// (SIGINT), killed after the grace period, and Local returns ctx's error.
//
// The ranks die with the launcher. While Local runs it catches SIGINT and
// SIGTERM and forwards each to every rank's process group; the ranks are
// killed when the grace period after the first one ends, or at once on a
// second one, and Local returns a *SignalError. On Linux every rank also
// has SIGKILL as its parent-death signal, so a launcher killed outright
// (SIGKILL, a crash) takes its ranks with it. The kernel sends that signal
// when the thread that started the child exits, not the process, and the
// Go runtime may end threads; so Local starts every rank from one goroutine
// locked to its OS thread, which stays until the last rank has exited.
// The parent-death signal reaches the rank process only: what a rank
// started itself (the binary of a `go run`, a shell's children) watches
// the launcher instead, through a pipe every rank inherits (LauncherVar),
// when it calls WatchLauncher (runtime/world does for the ranks it opens):
// it then ends its rank's process group. A program that calls neither is
// left to the launcher's SIGTERM forwarding, which a SIGKILL prevents.
func Local(ctx context.Context, n int, cmd []string, opts LocalOptions) error {
	if n < 1 || n > MaxLocal {
		return fmt.Errorf("launch: %d ranks; want 1..%d on one machine", n, MaxLocal)
	}
	if len(cmd) == 0 {
		return errors.New("launch: empty command")
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return fmt.Errorf("launch: port %d; want 1..65535, or 0 for a free port", opts.Port)
	}
	if opts.Grace < 0 || opts.Grace > MaxGrace {
		return fmt.Errorf("launch: grace period %v; want at most %v (0: the default, %v)", opts.Grace, MaxGrace, DefaultGrace)
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.Grace == 0 {
		opts.Grace = DefaultGrace
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
		var err error
		if token, err = NewToken(); err != nil {
			return err
		}
	}

	var mu sync.Mutex // serializes whole lines across ranks and streams
	status := &prefixWriter{mu: &mu, w: opts.Stderr, prefix: []byte("[launch] ")}
	report := func(format string, args ...any) {
		fmt.Fprintf(status, format+"\n", args...)
	}

	// Forward SIGINT and SIGTERM while the ranks run.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	st := newStarter()
	defer st.stop()

	type exit struct {
		rank int
		err  error
		at   time.Time
	}
	exits := make(chan exit, n)
	procs := make([]*exec.Cmd, n)
	alive := make([]bool, n)
	var outputs sync.WaitGroup // the ranks' output readers
	var readEnds []*os.File
	// drain waits for the output readers once the ranks are gone, giving
	// whoever inherited their output (a grandchild) outputDelay to finish
	// writing it, then stops reading.
	drain := func() {
		done := make(chan struct{})
		go func() { outputs.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(outputDelay):
			for _, f := range readEnds {
				f.Close()
			}
			<-done
		}
	}
	defer func() {
		for _, f := range readEnds {
			f.Close()
		}
	}()
	// The ranks watch the launcher through a pipe (WatchLauncher): what a
	// rank started itself dies with the launcher too, however it ends.
	watch, err := newWatchPipe()
	if err != nil {
		return fmt.Errorf("launch: a pipe for the ranks to watch the launcher: %w", err)
	}
	defer watch.close()
	base := append(os.Environ(), opts.Env...)
	// removeStaleSwap removes the swap tiers' directories whose owners are
	// gone under the ranks' TMPDIR (where examples/mlp's file tier writes):
	// when the job ends, those of ranks killed outright (SIGKILL), and
	// before it starts, those a killed launcher's ranks left.
	removeStaleSwap := func() {
		tmp := tempDir(base)
		if tmp == "" {
			return
		}
		switch gone := swapdir.RemoveStale(tmp, ""); len(gone) {
		case 0:
		case 1:
			report("removed the swap directory %s, its process gone", gone[0])
		default:
			report("removed %d swap directories under %s, their processes gone", len(gone), tmp)
		}
	}
	removeStaleSwap()
	t0 := time.Now()
	for r := range n {
		c := exec.Command(cmd[0], cmd[1:]...)
		c.Dir = opts.Dir
		c.Env = append(base[:len(base):len(base)],
			"RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r),
			"WORLD_SIZE="+strconv.Itoa(n), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			TokenVar+"="+token)
		prefix := []byte(fmt.Sprintf("[rank %d] ", r))
		setProcessGroup(c)
		watch.give(c)
		// The ranks write to pipes of ours, read by goroutines of ours, so
		// that Wait returns when the rank exits, not when whoever inherited
		// its output closes it: the exit times order the failures.
		pipes, err := rankPipes(c)
		if err == nil {
			err = st.start(c)
		}
		pipes.closeWriteEnds() // the rank holds its own copies
		if err != nil {
			pipes.closeReadEnds()
			for q := range r {
				signalGroup(procs[q], syscall.SIGKILL)
			}
			for range r {
				<-exits
			}
			drain()
			return &RankError{Rank: r, Err: fmt.Errorf("start %q: %w", cmd[0], err)}
		}
		readEnds = append(readEnds, pipes.stdoutR, pipes.stderrR)
		for _, p := range []struct {
			r *os.File
			w io.Writer
		}{{pipes.stdoutR, opts.Stdout}, {pipes.stderrR, opts.Stderr}} {
			outputs.Add(1)
			go func() {
				defer outputs.Done()
				pw := &prefixWriter{mu: &mu, w: p.w, prefix: prefix}
				_, _ = io.Copy(pw, p.r)
				pw.flush()
			}()
		}
		procs[r], alive[r] = c, true
		log.Debug("rank started", "rank", r, "pid", c.Process.Pid)
		go func() {
			err := c.Wait()
			exits <- exit{r, err, time.Now()}
		}()
	}
	watch.closeRead() // the ranks hold their own copies
	report("started %d ranks of %q (MASTER_ADDR=127.0.0.1 MASTER_PORT=%d)", n, cmd[0], port)

	var (
		first       *RankError // the earliest failure so far
		firstAt     time.Time
		failedAt    = make(map[int]time.Time)
		killedBy    = make(map[int]bool) // ranks the launcher killed
		stopped     = make(map[int]bool) // ranks found stopped by a signal
		lookAgain   <-chan time.Time     // once a rank has exited: when to look for stopped ranks again
		result      error                // a cancellation or a signal, when no rank failed before it
		deadline    <-chan time.Time
		stopping    bool // ranks interrupted or killed by the launcher
		signaled    bool // a signal was forwarded
		interrupted bool // the ranks were interrupted because ctx was canceled
	)
	killAll := func() {
		for r, c := range procs {
			if alive[r] {
				killedBy[r] = true
				signalGroup(c, syscall.SIGKILL)
			}
		}
	}
	onSignal := func(sig os.Signal) {
		switch {
		case signaled:
			report("received %v again: killing the ranks", sig)
			killAll()
			return
		case interrupted && sig == os.Interrupt:
			// The Ctrl-C that canceled ctx too (signal.NotifyContext in
			// the caller): the ranks were interrupted already.
			signaled = true
			return
		}
		signaled, stopping = true, true
		if result == nil && first == nil {
			result = &SignalError{Signal: sig}
		}
		report("received %v: forwarding it to the ranks; killing them in %v", sig, opts.Grace)
		for r, c := range procs {
			if alive[r] {
				signalGroup(c, sig)
			}
		}
		if deadline == nil {
			deadline = time.After(opts.Grace)
		}
	}
	// blame makes f the first failure if it comes before the one so far:
	// a death or stop by a signal is the cause before any error exit;
	// among equals, the first in time.
	blame := func(f *RankError, at time.Time) {
		if first == nil || (f.Signaled && !first.Signaled) || (f.Signaled == first.Signaled && at.Before(firstAt)) {
			first, firstAt = f, at
		}
	}
	// findStopped looks for ranks a signal stopped among those still
	// running, once one has exited: they are alive and silent, and never
	// exit to be blamed. It returns whether every running rank is stopped
	// (then nothing is left to wait for).
	findStopped := func(now time.Time) bool {
		all := true
		for r, c := range procs {
			if !alive[r] || killedBy[r] {
				continue
			}
			if !stopped[r] {
				pid, ok := stoppedMember(c.Process.Pid)
				if !ok {
					all = false
					continue
				}
				stopped[r], failedAt[r] = true, now
				who := ""
				if pid != c.Process.Pid {
					who = fmt.Sprintf(" (process %d of its group)", pid)
				}
				report("rank %d found stopped by a signal at +%v%s: alive but silent", r, now.Sub(t0).Round(time.Millisecond), who)
				blame(&RankError{Rank: r, Err: errStopped, Signaled: true, Stopped: true}, now)
				if deadline == nil && !stopping {
					report("waiting up to %v for the ranks to go on (SIGCONT) or exit, then killing them", opts.Grace)
					deadline = time.After(opts.Grace)
				}
			}
		}
		return all
	}
	// exitFailed reports whether a rank has failed by exiting (not merely
	// stopped).
	exitFailed := func() bool {
		for r := range failedAt {
			if !stopped[r] {
				return true
			}
		}
		return false
	}
	for running := n; running > 0; {
		select {
		case e := <-exits:
			running--
			alive[e.rank] = false
			at := e.at.Sub(t0).Round(time.Millisecond)
			switch {
			case stopped[e.rank] && killedBy[e.rank]:
				report("rank %d, stopped, killed by the launcher (%v)", e.rank, e.err)
			case e.err == nil:
				report("rank %d exited with status 0", e.rank)
			case killedBy[e.rank] && first != nil:
				report("rank %d killed after rank %d failed (%v)", e.rank, first.Rank, e.err)
			case killedBy[e.rank] || stopping:
				report("rank %d stopped by the launcher (%v)", e.rank, e.err)
			default:
				report("rank %d failed at +%v: %v", e.rank, at, e.err)
				failedAt[e.rank] = e.at
				blame(&RankError{Rank: e.rank, Err: e.err, Signaled: diedOfSignal(e.err)}, e.at)
				if running > 0 && deadline == nil {
					report("waiting up to %v for the other ranks to exit, then killing them", opts.Grace)
					deadline = time.After(opts.Grace)
				}
			}
			if running > 0 && !stopping && lookAgain == nil {
				lookAgain = time.After(0)
			}
		case <-lookAgain:
			// Once a rank has exited, those still running are looked at
			// every stopPoll: a rank that stopped is alive but silent,
			// its peers fail (or, under a shell that hides their
			// failure, exit 0) and it never exits.
			lookAgain = time.After(stopPoll)
			// In a failing job, ranks left stopped can only be killed:
			// at once. Else (their peers exited 0) they get the grace
			// period to be continued.
			if findStopped(time.Now()) && exitFailed() {
				report("the ranks still running are stopped: killing them")
				killAll()
				lookAgain = nil
			}
		case <-deadline:
			deadline = nil
			findStopped(time.Now())
			killAll()
		case sig := <-sigs:
			onSignal(sig)
		case <-ctx.Done():
			ctxErr := ctx.Err()
			ctx = context.Background() // handled; keep waiting for the exits
			select {
			case sig := <-sigs: // the signal that canceled ctx, most likely
				onSignal(sig)
				continue
			default:
			}
			if result == nil && first == nil && !signaled {
				result = fmt.Errorf("launch: %w", ctxErr)
				stopping, interrupted = true, true
				report("canceled: interrupting the ranks")
				for r, c := range procs {
					if alive[r] {
						signalGroup(c, os.Interrupt)
					}
				}
				deadline = time.After(opts.Grace)
			}
		}
	}
	drain()
	// A rank killed outright (SIGKILL) leaves its swap tier's directory.
	removeStaleSwap()
	if first != nil {
		for r, at := range failedAt {
			if r != first.Rank && (first.Signaled || !at.Before(firstAt)) {
				first.Later = append(first.Later, r)
			}
		}
		for r := range killedBy {
			if _, failed := failedAt[r]; !failed {
				first.Killed = append(first.Killed, r)
			}
		}
		slices.Sort(first.Later)
		slices.Sort(first.Killed)
		switch {
		case first.Stopped:
			also := ""
			if len(first.Later) > 0 {
				also = fmt.Sprintf("; %s failed too, most likely because it stopped answering", ranksList(first.Later))
			}
			report("summary: rank %d was stopped by a signal (found at +%v), the first cause%s", first.Rank, firstAt.Sub(t0).Round(time.Millisecond), also)
		case first.Signaled:
			also := ""
			if len(first.Later) > 0 {
				also = fmt.Sprintf("; %s failed too, most likely because it died", ranksList(first.Later))
			}
			report("summary: rank %d was killed by a signal (at +%v: %v), the first cause%s", first.Rank, firstAt.Sub(t0).Round(time.Millisecond), first.Err, also)
		default:
			report("summary: rank %d failed first (at +%v: %v)", first.Rank, firstAt.Sub(t0).Round(time.Millisecond), first.Err)
		}
		return first
	}
	return result
}

// tempDir is the TMPDIR of environment env (the last setting wins, as
// exec.Cmd does), else os.TempDir's default.
func tempDir(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "TMPDIR="); ok && v != "" {
			return v
		}
	}
	if runtime.GOOS == "windows" {
		return "" // TMP, TEMP, USERPROFILE: and no stale directories there (no flock)
	}
	return "/tmp"
}

// stopPoll is how often Local, once a rank has failed, looks for ranks a
// signal stopped among those still running.
const stopPoll = 200 * time.Millisecond

// outputDelay is how long Local reads the ranks' output after the last rank
// exited (a grandchild may still hold it).
const outputDelay = time.Second

// starter starts processes from one goroutine locked to its OS thread, so
// that the thread, whose exit fires the children's parent-death signal on
// Linux, lives until stop is called (after the children are gone).
type starter struct {
	req  chan *exec.Cmd
	resp chan error
}

func newStarter() *starter {
	s := &starter{req: make(chan *exec.Cmd), resp: make(chan error)}
	go func() {
		runtime.LockOSThread()
		// Unlock before returning: a goroutine that exits locked takes its
		// thread with it, and stop is called after the children are gone,
		// so either would do; unlocking lets the runtime reuse the thread.
		defer runtime.UnlockOSThread()
		for c := range s.req {
			s.resp <- c.Start()
		}
	}()
	return s
}

func (s *starter) start(c *exec.Cmd) error {
	s.req <- c
	return <-s.resp
}

func (s *starter) stop() { close(s.req) }

// pipes are a rank's stdout and stderr.
type pipes struct{ stdoutR, stdoutW, stderrR, stderrW *os.File }

func rankPipes(c *exec.Cmd) (*pipes, error) {
	p := &pipes{}
	var err error
	if p.stdoutR, p.stdoutW, err = os.Pipe(); err != nil {
		return p, err
	}
	if p.stderrR, p.stderrW, err = os.Pipe(); err != nil {
		return p, err
	}
	c.Stdout, c.Stderr = p.stdoutW, p.stderrW
	return p, nil
}

func (p *pipes) closeWriteEnds() {
	for _, f := range []*os.File{p.stdoutW, p.stderrW} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *pipes) closeReadEnds() {
	for _, f := range []*os.File{p.stdoutR, p.stderrR} {
		if f != nil {
			f.Close()
		}
	}
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

// Self is Local for the common case of an example or trainer that, started
// by hand, launches itself: n processes of this same executable with this
// process's arguments, an interrupt (Ctrl-C) stopping them all.
func Self(n int, opts LocalOptions) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("launch: finding this executable to start %d ranks of it: %w", n, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return Local(ctx, n, append([]string{exe}, os.Args[1:]...), opts)
}

// Launched reports whether a launcher (ppgen launch, torchrun, mpirun,
// srun) started this process: whether FromEnv finds its variables. A
// process that was not launched may launch itself (Self).
func Launched() bool {
	_, err := FromEnv()
	return !errors.Is(err, ErrNotLaunched)
}
