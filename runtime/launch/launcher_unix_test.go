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
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/internal/swapdir"
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

// TestLauncherKilledUnderShell: a launcher killed with SIGKILL takes with
// it the trainers its ranks, shells, started (`ppgen launch -- sh -c
// 'trainer ...; true'`): the parent-death signal ends the shells only, and
// the trainers, watching the launcher's pipe (WatchLauncher), end their
// process groups.
func TestLauncherKilledUnderShell(t *testing.T) {
	t.Setenv("LAUNCH_UNDER_SH", "1")
	c, pids, out := startLauncher(t, 3, "watch-pid", time.Second)
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	took, left := waitGone(pids, 10*time.Second)
	if len(left) > 0 {
		t.Fatalf("trainers %v still run %v after their launcher was killed:\n%s", left, took, out())
	}
	t.Logf("trainers gone %v after the launcher's SIGKILL", took)
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

func init() { ExtraHelpers["killed"] = killedHelper }

// killedHelper: rank LAUNCH_VICTIM announces its death (a file in
// LAUNCH_DIR), waits 300 ms and kills itself with SIGKILL; the other ranks
// exit 1 as soon as they see the announcement, as ranks whose peer died do
// (their transport fails), and so before the victim's death is noticed.
func killedHelper(env Env) int {
	dying := filepath.Join(os.Getenv("LAUNCH_DIR"), "dying")
	if victim, _ := strconv.Atoi(os.Getenv("LAUNCH_VICTIM")); env.Rank == victim {
		if err := os.WriteFile(dying, nil, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 5
		}
		time.Sleep(300 * time.Millisecond)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return 6
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(dying); err == nil {
			fmt.Printf("rank %d: my peer died\n", env.Rank)
			return 1
		}
	}
	return 7
}

// TestLocalBlamesTheKilledRank: when a rank is killed by a signal (not the
// launcher's), it is the cause, named in the error and the summary, even
// though the other ranks' error exits, its consequences, were observed
// before its death.
func TestLocalBlamesTheKilledRank(t *testing.T) {
	for _, victim := range []int{2, 0} {
		var out, errOut syncBuffer
		start := time.Now()
		err := Local(context.Background(), 4, helperCmd(), LocalOptions{
			Stdout: &out, Stderr: &errOut, Grace: time.Minute,
			Env: []string{"LAUNCH_HELPER=killed", "LAUNCH_DIR=" + t.TempDir(), "LAUNCH_VICTIM=" + strconv.Itoa(victim)},
		})
		var re *RankError
		if !errors.As(err, &re) {
			t.Fatalf("victim %d: err = %v\n%s", victim, err, errOut.String())
		}
		var others []int
		for r := range 4 {
			if r != victim {
				others = append(others, r)
			}
		}
		if re.Rank != victim || !re.Signaled || !slices.Equal(re.Later, others) || len(re.Killed) != 0 {
			t.Errorf("victim %d: blamed rank %d (signaled %v), later %v, killed %v; want rank %d signaled, later %v\n%s",
				victim, re.Rank, re.Signaled, re.Later, re.Killed, victim, others, errOut.String())
		}
		want := fmt.Sprintf("launch: rank %d failed: signal: killed (killed by a signal, the first cause; ranks %s failed too, most likely because it died)",
			victim, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(others)), ", "), "[]"))
		if err.Error() != want {
			t.Errorf("err = %q\nwant  %q", err, want)
		}
		for _, w := range []string{
			fmt.Sprintf("[launch] summary: rank %d was killed by a signal (at +", victim),
			fmt.Sprintf("[launch] rank %d failed at +", others[0]),
		} {
			if !strings.Contains(errOut.String(), w) {
				t.Errorf("stderr lacks %q:\n%s", w, errOut.String())
			}
		}
		// The consequences were observed first: the order the rule is for.
		s := errOut.String()
		if i, j := strings.Index(s, fmt.Sprintf("rank %d failed at", others[0])), strings.Index(s, fmt.Sprintf("rank %d failed at", victim)); i < 0 || j < i {
			t.Errorf("the victim's death was not observed after its peers' exits:\n%s", s)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("victim %d: took %v", victim, took)
		}
	}
}

func init() {
	ExtraHelpers["stopped"] = stoppedHelper
	ExtraHelpers["swap-killed"] = swapKilledHelper
}

// swapKilledHelper: rank 1 makes a swap tier's directory under TMPDIR,
// locked as runtime/swap's file tier does, and kills itself with SIGKILL
// (which no cleanup survives); the other ranks exit 0.
func swapKilledHelper(env Env) int {
	if env.Rank != 1 {
		return 0
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-feedbeef", swapdir.Prefix, os.Getpid()))
	if err := os.Mkdir(dir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	if _, err := swapdir.Lock(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
	return 6
}

// TestLocalRemovesKilledRanksSwapDirs: the swap directory of a rank killed
// outright is gone when Local returns; a live tier's (this process's) is
// kept.
func TestLocalRemovesKilledRanksSwapDirs(t *testing.T) {
	tmp := t.TempDir()
	live := filepath.Join(tmp, swapdir.Prefix+"1-live")
	if err := os.Mkdir(live, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := swapdir.Lock(live)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	var out, errOut syncBuffer
	err = Local(context.Background(), 3, helperCmd(), LocalOptions{
		Stdout: &out, Stderr: &errOut, Grace: time.Minute,
		Env: []string{"LAUNCH_HELPER=swap-killed", "TMPDIR=" + tmp},
	})
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || !re.Signaled {
		t.Fatalf("err = %v, want rank 1 killed\n%s", err, errOut.String())
	}
	es, _ := os.ReadDir(tmp)
	if len(es) != 1 || es[0].Name() != filepath.Base(live) {
		t.Errorf("left under TMPDIR: %v, want only %s\n%s", es, filepath.Base(live), errOut.String())
	}
	if want := "[launch] removed the swap directory " + tmp + "/" + swapdir.Prefix; !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
	}
}

// stoppedHelper is killedHelper with SIGSTOP for SIGKILL: rank
// LAUNCH_VICTIM announces it, waits 300 ms and stops itself, alive but
// silent; the other ranks exit 1 on the announcement, as ranks whose
// transports time out on a silent peer do.
func stoppedHelper(env Env) int {
	if victim, _ := strconv.Atoi(os.Getenv("LAUNCH_VICTIM")); env.Rank == victim {
		if err := os.WriteFile(filepath.Join(os.Getenv("LAUNCH_DIR"), "dying"), nil, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 5
		}
		time.Sleep(300 * time.Millisecond)
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		time.Sleep(time.Minute)
		return 6
	}
	return killedHelper(env)
}

// TestLocalBlamesByCause: the rank a signal killed or stopped is named, by
// Local's error and its summary, although its peers' error exits were seen
// first; also when the rank is a shell running the trainer (the shell
// reports the trainer's SIGKILL as exit status 137, or hides it behind
// `; true`, and a stopped trainer is a member of the rank's process
// group). In a failing job the ranks left stopped are killed at once, not
// after the grace period (1 min here); when their peers exited 0 (`;
// true`), when the grace period (1 s there) ends.
func TestLocalBlamesByCause(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("stopped processes are found in Linux's /proc")
	}
	helper := strings.Join(helperCmd(), " ")
	for _, tc := range []struct {
		name    string
		mode    string
		cmd     []string
		stopped bool
		later   []int // `; true` hides the peers' failures: they exit 0
		grace   time.Duration
		msg     string
	}{
		{"stopped", "stopped", helperCmd(), true, []int{0, 1, 3}, time.Minute,
			"launch: rank 2 failed: stopped by a signal (SIGSTOP or SIGTSTP), alive but silent (the first cause; ranks 0, 1, 3 failed too, most likely because it stopped answering; the launcher killed it)"},
		{"stopped under sh", "stopped", []string{"sh", "-c", helper + "; true"}, true, nil, time.Second,
			"launch: rank 2 failed: stopped by a signal (SIGSTOP or SIGTSTP), alive but silent (the launcher killed it)"},
		{"killed under sh", "killed", []string{"sh", "-c", helper + "; exit $?"}, false, []int{0, 1, 3}, time.Minute,
			"launch: rank 2 failed: exit status 137 (killed by a signal, the first cause; ranks 0, 1, 3 failed too, most likely because it died)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut syncBuffer
			start := time.Now()
			err := Local(context.Background(), 4, tc.cmd, LocalOptions{
				Stdout: &out, Stderr: &errOut, Grace: tc.grace,
				Env: []string{"LAUNCH_HELPER=" + tc.mode, "LAUNCH_DIR=" + t.TempDir(), "LAUNCH_VICTIM=2"},
			})
			took := time.Since(start)
			var re *RankError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v\n%s", err, errOut.String())
			}
			if re.Rank != 2 || !re.Signaled || re.Stopped != tc.stopped || !slices.Equal(re.Later, tc.later) || len(re.Killed) != 0 {
				t.Errorf("blamed rank %d (signaled %v, stopped %v), later %v, killed %v; want rank 2 signaled, stopped %v, later %v\n%s",
					re.Rank, re.Signaled, re.Stopped, re.Later, re.Killed, tc.stopped, tc.later, errOut.String())
			}
			if err.Error() != tc.msg {
				t.Errorf("err = %q\nwant  %q", err, tc.msg)
			}
			summary := "[launch] summary: rank 2 was killed by a signal (at +"
			if tc.stopped {
				summary = "[launch] summary: rank 2 was stopped by a signal (found at +"
			}
			if !strings.Contains(errOut.String(), summary) {
				t.Errorf("stderr lacks %q:\n%s", summary, errOut.String())
			}
			if took > 20*time.Second {
				t.Errorf("took %v: the stopped rank waited for the grace period", took)
			}
			t.Logf("%v\n%s", took, errOut.String())
		})
	}
}

// TestTCPStoppedRankBlamed: a TCP job of 4 ranks in which rank 2 stops
// (SIGSTOP) after the rendezvous: every other rank's transport blames rank
// 2 (its missed heartbeats, seen directly or relayed), whichever rank it
// was waiting on, and the launcher's error and summary name rank 2,
// stopped.
func TestTCPStoppedRankBlamed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("stopped processes are found in Linux's /proc")
	}
	start := time.Now()
	out, errOut, err, _ := runHelper(t, context.Background(), 4, "stall", time.Minute)
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 2 || !re.Stopped || !slices.Equal(re.Later, []int{0, 1, 3}) {
		t.Fatalf("err = %v, want rank 2 stopped, ranks 0, 1, 3 later\n%s\n%s", err, out, errOut)
	}
	for _, r := range []int{0, 1, 3} {
		if want := fmt.Sprintf("[rank %d] blame rank 2: ", r); !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if want := "[launch] summary: rank 2 was stopped by a signal"; !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut)
	}
	t.Logf("%v\n%s%s", time.Since(start), out, errOut)
}
