//go:build unix

package launch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startLauncher runs the test binary as a launcher of n ranks in mode and
// returns it with the pids its ranks print (each rank prints "pid N" or
// "ready pid N" first) and a function returning all output read so far;
// once the launcher has been waited for, the function first reads the
// output to its end (every writer gone, at most 10 s), so that no line is
// still in the pipe however loaded the machine.
func startLauncher(t *testing.T, n int, mode string, grace time.Duration) (*exec.Cmd, []int, func() string) {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	c.Env = append(os.Environ(), "LAUNCH_AS_LAUNCHER="+mode, "LAUNCH_RANKS="+strconv.Itoa(n), "LAUNCH_GRACE="+grace.String())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout, c.Stderr = w, w
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var mu sync.Mutex
	var all strings.Builder
	pids := make(chan int, n)
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			all.WriteString(line + "\n")
			mu.Unlock()
			if i := strings.Index(line, "pid "); i >= 0 {
				if p, err := strconv.Atoi(line[i+4:]); err == nil {
					pids <- p
				}
			}
		}
	}()
	out := func() string {
		if c.ProcessState != nil {
			select {
			case <-eof:
			case <-time.After(10 * time.Second):
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return all.String()
	}
	var got []int
	timeout := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case p := <-pids:
			got = append(got, p)
		case <-timeout:
			c.Process.Kill()
			c.Wait()
			t.Fatalf("the ranks did not start:\n%s", out())
		}
	}
	t.Cleanup(func() {
		for _, p := range got {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})
	return c, got, out
}

// gone reports whether pid is no longer running (exited, or a zombie
// waiting for a parent that does not reap).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// waitGone waits up to d for every pid to be gone and returns how long it
// took, or the pids still running.
func waitGone(pids []int, d time.Duration) (time.Duration, []int) {
	start := time.Now()
	for {
		var left []int
		for _, p := range pids {
			if !gone(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Since(start) > d {
			return time.Since(start), left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLauncherKilled: a launcher killed with SIGKILL takes its ranks with
// it (the parent-death signal).
func TestLauncherKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	c, pids, out := startLauncher(t, 3, "pid", time.Second)
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	took, left := waitGone(pids, 10*time.Second)
	if len(left) > 0 {
		t.Fatalf("ranks %v still run %v after their launcher was killed:\n%s", left, took, out())
	}
	t.Logf("ranks gone %v after the launcher's SIGKILL", took)
}

// TestLauncherForwardsSIGTERM: SIGTERM to the launcher reaches every rank;
// the launcher exits after them with a SignalError, long before its grace
// period (1 min, so that a loaded machine cannot reach it).
func TestLauncherForwardsSIGTERM(t *testing.T) {
	c, pids, out := startLauncher(t, 2, "term", time.Minute)
	start := time.Now()
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := c.Wait()
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("launcher: %v, want exit status 3\n%s", err, out())
	}
	if took > 30*time.Second {
		t.Errorf("the launcher took %v to exit", took)
	}
	for _, want := range []string{"[rank 0] got terminated", "[rank 1] got terminated", "[launch] received terminated: forwarding it to the ranks",
		"[launch] rank 0 exited with status 0", "launch: received terminated; forwarded it to the ranks"} {
		if !strings.Contains(out(), want) {
			t.Errorf("output lacks %q:\n%s", want, out())
		}
	}
	if _, left := waitGone(pids, 10*time.Second); len(left) > 0 {
		t.Errorf("ranks %v still run", left)
	}
}

// TestLauncherKillsRanksIgnoringSIGTERM: ranks that ignore the forwarded
// SIGTERM are killed when the grace period ends.
func TestLauncherKillsRanksIgnoringSIGTERM(t *testing.T) {
	c, pids, out := startLauncher(t, 2, "ignore-term", 300*time.Millisecond)
	start := time.Now()
	c.Process.Signal(syscall.SIGTERM)
	err := c.Wait()
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || took > 15*time.Second {
		t.Errorf("launcher: %v after %v, want exit status 3 soon after the 300ms grace\n%s", err, took, out())
	}
	if _, left := waitGone(pids, 10*time.Second); len(left) > 0 {
		t.Errorf("ranks %v still run", left)
	}
	if !strings.Contains(out(), "[launch] rank 0 stopped by the launcher (signal: killed)") {
		t.Errorf("output:\n%s", out())
	}
}

// TestRanksSurviveThreadExits: the parent-death signal fires when the
// thread that started a rank exits. Goroutines that exit locked to their
// threads make the Go runtime end those threads; while they do, Local's
// ranks must live on (Local starts them from a thread of its own).
func TestRanksSurviveThreadExits(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					runtime.LockOSThread() // and exit locked: the thread goes
				}()
			}
			wg.Wait()
			time.Sleep(time.Millisecond)
		}
	}()
	_, errOut, err, _ := runHelper(t, context.Background(), 4, "nap", time.Second)
	close(stop)
	churn.Wait()
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
}
