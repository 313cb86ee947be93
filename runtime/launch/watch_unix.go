//go:build unix

package launch

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LauncherVar tells a rank of Local where to watch its launcher: "FD:INODE",
// the descriptor of the read end of a pipe whose only write end the
// launcher holds, and that pipe's inode (so that a process that inherited
// the variable but not the descriptor, which then is something else, does
// not take it for the pipe). The read end sees end-of-file when the
// launcher is gone, however it ended.
const LauncherVar = "PPGEN_LAUNCHER"

// launcherFD is the descriptor the ranks get the pipe's read end on
// (exec.Cmd.ExtraFiles' first).
const launcherFD = 3

// watchPipe is the launcher's side: a pipe whose read end every rank
// inherits and whose write end only the launcher holds (close-on-exec).
type watchPipe struct{ r, w *os.File }

func newWatchPipe() (*watchPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &watchPipe{r: r, w: w}, nil
}

// give makes c inherit the read end and names it in c's environment.
func (p *watchPipe) give(c *exec.Cmd) {
	if p == nil {
		return
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(p.r.Fd()), &st); err != nil {
		return
	}
	c.ExtraFiles = append(c.ExtraFiles, p.r)
	c.Env = append(c.Env, fmt.Sprintf("%s=%d:%d", LauncherVar, launcherFD+len(c.ExtraFiles)-1, st.Ino))
}

// closeRead drops the launcher's copy of the read end, once every rank
// holds its own.
func (p *watchPipe) closeRead() {
	if p != nil {
		p.r.Close()
	}
}

// close closes the write end, so the ranks' watchers (and their
// children's) see end-of-file, and the read end if it is still open.
func (p *watchPipe) close() {
	if p != nil {
		p.w.Close()
		p.r.Close()
	}
}

var watchOnce sync.Once

// WatchLauncher makes this process end with the ppgen launcher (Local) that
// started it, or whose rank started it (`ppgen launch -- sh -c 'trainer
// ...'`: the trainer is the rank's child). The kernel's parent-death
// signal reaches a rank only, not what the rank started, so a launcher
// killed with SIGKILL would leave such trainers running; a process that
// calls WatchLauncher sees the launcher's pipe (LauncherVar) close, sends
// SIGTERM to its process group (its rank's: the rank's shell and its
// trainers; the default action ends them, a handler may clean up first)
// and, if it is still alive 5 s later, SIGKILL. runtime/world calls it for
// the ranks it opens from the launcher's environment. It reports whether
// there is a launcher to watch; calls after the first do nothing.
func WatchLauncher() bool {
	watching := false
	watchOnce.Do(func() {
		fd, ok := launcherPipe(os.Getenv(LauncherVar))
		if !ok {
			return
		}
		watching = true
		go func() {
			var b [64]byte
			for {
				n, err := syscall.Read(fd, b[:])
				if n > 0 || err == syscall.EINTR {
					continue
				}
				if err == syscall.EAGAIN { // a non-blocking descriptor: block
					if syscall.SetNonblock(fd, false) == nil {
						continue
					}
				}
				break // end-of-file (or an error): the launcher is gone
			}
			// Nothing is printed: the output most likely went to the
			// launcher's pipes, and a write there would end this process
			// by SIGPIPE before its group.
			_ = syscall.Kill(0, syscall.SIGTERM)
			time.Sleep(5 * time.Second)
			_ = syscall.Kill(0, syscall.SIGKILL)
		}()
	})
	return watching
}

// launcherPipe parses LauncherVar's value and returns its descriptor when
// it is a pipe with that inode.
func launcherPipe(v string) (int, bool) {
	fdS, inoS, ok := strings.Cut(v, ":")
	if !ok {
		return 0, false
	}
	fd, err1 := strconv.Atoi(fdS)
	ino, err2 := strconv.ParseUint(inoS, 10, 64)
	if err1 != nil || err2 != nil || fd < 3 {
		return 0, false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO || uint64(st.Ino) != ino {
		return 0, false
	}
	return fd, true
}
