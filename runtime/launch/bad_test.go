//go:build unix

package launch

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ppgen/ppgen/internal/doctable"
)

var update = flag.Bool("update", false, "rewrite the launch table of docs/trust.md with the measured figures")

// badLaunch is one bad launch: run returns the result cell, the message and
// the peak memory cell (when it measured a process of its own; "" makes
// the table use the sampled Go heap of this process).
type badLaunch struct {
	name string
	run  func(t *testing.T) (result, msg, mem string)
	want string // in the message
}

func envCase(name string, env map[string]string, want string) badLaunch {
	return badLaunch{name, func(t *testing.T) (string, string, string) {
		_, err := FromLookup(lookup(env))
		if err == nil {
			return "accepted", "", ""
		}
		return "error", err.Error(), ""
	}, want}
}

func localCase(name string, n int, opts LocalOptions, want string) badLaunch {
	return badLaunch{name, func(t *testing.T) (string, string, string) {
		opts.Stdout, opts.Stderr = &syncBuffer{}, &syncBuffer{}
		err := Local(context.Background(), n, helperCmd(), opts)
		if err == nil {
			return "ran", "", ""
		}
		return "error", err.Error(), ""
	}, want}
}

// rss is the peak resident memory of a process that ended.
func rss(ps *os.ProcessState) string {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok && runtime.GOOS == "linux" {
		return fmt.Sprintf("%.1f MiB RSS", float64(ru.Maxrss)/1024) // KiB on Linux
	}
	return "n/a"
}

func badLaunches() []badLaunch {
	rank := func(env ...string) map[string]string {
		m := map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}
		for i := 0; i+1 < len(env); i += 2 {
			m[env[i]] = env[i+1]
		}
		return m
	}
	cases := []badLaunch{
		envCase("WORLD_SIZE=100000", rank("WORLD_SIZE", "100000"), "WORLD_SIZE=100000: out of range, want 1..65536"),
		envCase("WORLD_SIZE of 20 digits", rank("WORLD_SIZE", "99999999999999999999"), "not an integer (want 1..65536)"),
		envCase("RANK=-1", rank("RANK", "-1"), "RANK=-1: out of range, want 0..65535"),
		envCase("RANK = WORLD_SIZE", rank("RANK", "2"), "RANK=2 is not in [0, WORLD_SIZE=2)"),
		envCase("LOCAL_RANK=7 of 2", rank("LOCAL_RANK", "7"), "LOCAL_RANK=7: out of range, want 0..1"),
		envCase("MASTER_PORT=70000", rank("MASTER_PORT", "70000"), `MASTER_PORT="70000": not a port number (1-65535)`),
		envCase("SLURM_JOB_ID=-5", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "-5"}, `SLURM_JOB_ID="-5": not a job number`),
		envCase("SLURM_JOB_NODELIST=gpu[01-02", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "gpu[01-02", "SLURM_JOB_ID": "1"}, "unbalanced '['"),
		envCase("PPGEN_TIMEOUT=0s", rank("PPGEN_TIMEOUT", "0s"), "PPGEN_TIMEOUT=0s: out of range, want more than 0 and at most 24h0m0s"),
		envCase("PPGEN_TIMEOUT=30 (no unit)", rank("PPGEN_TIMEOUT", "30"), `PPGEN_TIMEOUT="30": not a duration`),
		envCase("PPGEN_ALLOW_NO_TOKEN=yes", rank("PPGEN_ALLOW_NO_TOKEN", "yes"), `PPGEN_ALLOW_NO_TOKEN="yes": want 1 or true (run without a token), or 0 or false`),
		envCase("PPGEN_TOKEN of 1 MiB", rank("PPGEN_TOKEN", strings.Repeat("k", 1<<20)), "PPGEN_TOKEN is 1048576 bytes long; want at most 1024"),
		localCase("Local with 0 ranks", 0, LocalOptions{}, "launch: 0 ranks; want 1..1024 on one machine"),
		localCase("Local with 100000 ranks", 100000, LocalOptions{}, "launch: 100000 ranks; want 1..1024 on one machine"),
		localCase("Local with port 70000", 2, LocalOptions{Port: 70000}, "launch: port 70000; want 1..65535, or 0 for a free port"),
		localCase("Local with a grace period of 1h", 2, LocalOptions{Grace: time.Hour}, "launch: grace period 1h0m0s; want at most 10m0s (0: the default, 10s)"),
		{"rank command missing", func(t *testing.T) (string, string, string) {
			err := Local(context.Background(), 2, []string{"/nonexistent/ppgen-rank"}, LocalOptions{Stdout: &syncBuffer{}, Stderr: &syncBuffer{}})
			if err == nil {
				return "ran", "", ""
			}
			return "error", err.Error(), ""
		}, `launch: rank 0 failed: start "/nonexistent/ppgen-rank"`},
		{"rank 1 of 3 exits 3, the others hang", func(t *testing.T) (string, string, string) {
			_, _, err, _ := runHelper(t, context.Background(), 3, "fail", 300*time.Millisecond)
			return "error", fmt.Sprint(err), ""
		}, "launch: rank 1 failed: exit status 3 (ranks 0, 2 killed after rank 1 failed)"},
		{"rank 2 fails first, rank 1 later, rank 0 exits 0 before both", func(t *testing.T) (string, string, string) {
			_, _, err, _ := runHelper(t, context.Background(), 3, "order", 15*time.Second)
			return "error", fmt.Sprint(err), ""
		}, "launch: rank 2 failed: exit status 3 (rank 1 failed after it)"},
	}
	if runtime.GOOS == "linux" {
		cases = append(cases, badLaunch{"launcher killed (SIGKILL)", func(t *testing.T) (string, string, string) {
			c, pids, out := startLauncher(t, 3, "pid", time.Second)
			c.Process.Kill()
			c.Wait()
			took, left := waitGone(pids, 10*time.Second)
			if len(left) > 0 {
				return "ranks left", fmt.Sprintf("ranks %v still run %v after their launcher was killed:\n%s", left, took, out()), rss(c.ProcessState)
			}
			return "killed", fmt.Sprintf("all 3 ranks gone %v after the launcher", roundTime(took)), rss(c.ProcessState)
		}, "all 3 ranks gone"})
	}
	if runtime.GOOS != "windows" {
		cases = append(cases,
			badLaunch{"launcher sent SIGTERM", func(t *testing.T) (string, string, string) {
				c, _, out := startLauncher(t, 2, "term", 10*time.Second)
				c.Process.Signal(syscall.SIGTERM)
				c.Wait()
				return fmt.Sprintf("exit %d", c.ProcessState.ExitCode()), lastLine(out(), "launch: "), rss(c.ProcessState)
			}, "launch: received terminated; forwarded it to the ranks"},
			badLaunch{"launcher sent SIGTERM, ranks ignore it", func(t *testing.T) (string, string, string) {
				c, pids, out := startLauncher(t, 2, "ignore-term", 300*time.Millisecond)
				c.Process.Signal(syscall.SIGTERM)
				c.Wait()
				if _, left := waitGone(pids, 10*time.Second); len(left) > 0 {
					return "ranks left", fmt.Sprintf("ranks %v still run", left), rss(c.ProcessState)
				}
				return fmt.Sprintf("exit %d", c.ProcessState.ExitCode()), lastLine(out(), "[launch] rank 0 "), rss(c.ProcessState)
			}, "[launch] rank 0 stopped by the launcher (signal: killed)"},
		)
	}
	return cases
}

// lastLine returns the last line of out that starts with prefix.
func lastLine(out, prefix string) string {
	var last string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			last = line
		}
	}
	return last
}

// TestBadLaunch tries bad environments, bad options, failing ranks and a
// killed launcher: each is an error naming the value or the rank (or, for
// a killed launcher, ranks gone at once), within 10 s and 1 GB. With
// -update it writes the table of docs/trust.md (region launch).
func TestBadLaunch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	var rows [][]string
	for _, c := range badLaunches() {
		t.Run(c.name, func(t *testing.T) {
			var result, msg, mem string
			took, peak := doctable.Measure(time.Millisecond, func() { result, msg, mem = c.run(t) })
			if !strings.Contains(msg, c.want) {
				t.Errorf("%s: %s %q, want %q", c.name, result, msg, c.want)
			}
			if took > 10*time.Second || peak > 1<<30 {
				t.Errorf("took %v, heap peak %d bytes", took, peak)
			}
			if mem == "" {
				mem = fmt.Sprintf("%.1f MiB heap", float64(peak)/(1<<20))
			}
			rows = append(rows, []string{c.name, result, roundTime(took), mem, "`" + scrub(msg) + "`"})
		})
	}
	if *update && !t.Failed() {
		if err := doctable.Replace("../../docs/trust.md", "launch", []string{"case", "result", "time", "peak memory", "message"}, rows); err != nil {
			t.Fatal(err)
		}
	}
}

// roundTime rounds d to two or three significant digits.
func roundTime(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// scrub removes this machine's paths from a message.
func scrub(msg string) string {
	msg = strings.ReplaceAll(msg, os.Args[0], "launch.test")
	return regexp.MustCompile(regexp.QuoteMeta(os.TempDir())+`[^\s:"]*`).ReplaceAllString(msg, "DIR")
}
