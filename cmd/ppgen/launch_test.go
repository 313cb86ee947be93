package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/ppgen/ppgen/runtime/launch"
)

func TestLaunch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	var out, errs bytes.Buffer
	code := run([]string{"launch", "-n", "2", "--", "sh", "-c", "echo hello from $RANK of $WORLD_SIZE"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, want := range []string{"[rank 0] hello from 0 of 2", "[rank 1] hello from 1 of 2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	errs.Reset()
	code = run([]string{"launch", "-n", "3", "-grace", "1s", "--", "sh", "-c", `if [ "$RANK" = 1 ]; then exit 3; fi; sleep 30`}, &out, &errs)
	if code != 2 || !strings.Contains(errs.String(), "ppgen launch: rank 1 failed: exit status 3 (ranks 0, 2 killed after rank 1 failed)") || strings.Contains(errs.String(), "launch: launch:") {
		t.Errorf("a failing rank: exit %d, stderr:\n%s", code, errs.String())
	}

	// Every job gets a token: the launcher's PPGEN_TOKEN, or a random one.
	out.Reset()
	errs.Reset()
	t.Setenv("PPGEN_TOKEN", "")
	if code := run([]string{"launch", "-n", "2", "--", "sh", "-c", `echo "token=$PPGEN_TOKEN"`}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	toks := regexp.MustCompile(`token=([0-9a-f]{32})\n`).FindAllStringSubmatch(out.String(), -1)
	if len(toks) != 2 || toks[0][1] != toks[1][1] {
		t.Errorf("want one random 32-hex-digit token shared by both ranks:\n%s", out.String())
	}
	out.Reset()
	t.Setenv("PPGEN_TOKEN", "given-by-the-user")
	if code := run([]string{"launch", "-n", "1", "--", "sh", "-c", `echo "token=$PPGEN_TOKEN"`}, &out, &errs); code != 0 || !strings.Contains(out.String(), "token=given-by-the-user\n") {
		t.Errorf("the launcher's PPGEN_TOKEN is not passed on: exit %d\n%s", code, out.String())
	}
}

func TestLaunchUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"launch"}, "-n = 0; want the number of ranks to start, 1..1024"},
		{[]string{"launch", "-n", "2"}, "no command"},
		{[]string{"launch", "-n", "x", "--", "true"}, "invalid value"},
		{[]string{"launch", "-n", "1025", "--", "true"}, "-n = 1025; want the number of ranks to start, 1..1024"},
		{[]string{"launch", "-n", "-1", "--", "true"}, "-n = -1"},
		{[]string{"launch", "-n", "2", "-port", "65536", "--", "true"}, "-port = 65536; want 1..65535, or 0 for a free port"},
		{[]string{"launch", "-n", "2", "-grace", "0s", "--", "true"}, "-grace = 0s; want more than 0 and at most 10m0s"},
		{[]string{"launch", "-n", "2", "-grace", "11m", "--", "true"}, "-grace = 11m0s"},
	} {
		var out, errs bytes.Buffer
		if code := run(tc.args, &out, &errs); code != 2 || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errs.String(), tc.want)
		}
	}
}

// TestLaunchErrorMessage: the launcher's errors lose the package's
// "launch: " prefix (run names the command already), and a start that
// runs out of file descriptors says which limit to raise for how many
// ranks.
func TestLaunchErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		want    string
		notWant string
	}{
		{"rank failed", &launch.RankError{Rank: 1, Err: errors.New("exit status 3")}, "rank 1 failed: exit status 3", "launch:"},
		{"too many open files",
			&launch.RankError{Rank: 25, Err: fmt.Errorf("start %q: %w", "true", &os.PathError{Op: "fork/exec", Path: "/usr/bin/true", Err: syscall.EMFILE})},
			`rank 25 failed: start "true": fork/exec /usr/bin/true: too many open files; -n 400 ranks need more open files than the limit allows (the launcher holds pipes for each rank's output): raise it with ulimit -n (e.g. ulimit -n 6400), or start fewer ranks`, "launch:"},
		{"pipe", &launch.RankError{Rank: 3, Err: fmt.Errorf("start: %w", os.NewSyscallError("pipe2", syscall.EMFILE))}, "rank 3 failed: start: pipe2: too many open files; -n 400 ranks need more open files", ""},
		{"other", errors.New("launch: empty command"), "empty command", "ulimit"},
	} {
		e := &launchError{err: tc.err, ranks: 400}
		got := e.Error()
		if code := exitCode(e); code != 2 || !strings.HasPrefix(got, tc.want) || (tc.notWant != "" && strings.Contains(got, tc.notWant)) {
			t.Errorf("%s: exit %d, message %q; want %q", tc.name, code, got, tc.want)
		}
		if !errors.Is(&launchError{err: tc.err}, tc.err) {
			t.Errorf("%s: launchError does not unwrap to the launcher's error", tc.name)
		}
	}
}

// TestLaunchBlamesTheKilledRank: ppgen launch's summary and error name the
// rank a SIGKILL ended (rank 2), not a rank whose error exit, because its
// peer was dying, came first.
func TestLaunchBlamesTheKilledRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	if runtime.GOOS == "windows" {
		t.Skip("no SIGKILL")
	}
	t.Setenv("PPGEN_TEST_DIR", t.TempDir())
	// Rank 2 says it is dying, and 0.3 s later kills itself; the others
	// exit 1 when they hear it.
	script := `d="$PPGEN_TEST_DIR/dying"
if [ "$RANK" = 2 ]; then : > "$d"; sleep 0.3; kill -KILL $$; fi
while [ ! -e "$d" ]; do sleep 0.01; done
echo "rank $RANK: my peer died" >&2; exit 1`
	var out, errs bytes.Buffer
	code := run([]string{"launch", "-n", "4", "-grace", "5s", "--", "sh", "-c", script}, &out, &errs)
	for _, want := range []string{
		"ppgen launch: rank 2 failed: signal: killed (killed by a signal, the first cause; ranks 0, 1, 3 failed too, most likely because it died)",
		"[launch] summary: rank 2 was killed by a signal (at +",
	} {
		if code != 2 || !strings.Contains(errs.String(), want) {
			t.Errorf("exit %d, stderr lacks %q:\n%s", code, want, errs.String())
		}
	}
}
