package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"syscall"

	"github.com/ppgen/ppgen/runtime/launch"
)

// runLaunch starts N local processes of a command as the ranks of one job,
// with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and PPGEN_TOKEN set (the
// launcher's PPGEN_TOKEN, or a new random one per job), prefixes their
// output with "[rank N] ", and fails naming the rank whose failure caused
// the others' (launch.RankError: one killed or stopped by a signal first).
// The ranks die with the launcher: SIGINT and SIGTERM are forwarded to
// them, and a killed launcher takes them with it (Linux's parent-death
// signal; what they started, through launch.WatchLauncher) (launch.Local).
func runLaunch(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("launch", flag.ContinueOnError)
	n := fs.Int("n", 0, "number of ranks (processes) to start, 1..1024")
	port := fs.Int("port", 0, "MASTER_PORT, 1..65535 (0: a free port)")
	grace := fs.Duration("grace", launch.DefaultGrace, "how long the other ranks may take to exit after one fails or the launcher is interrupted before they are killed (at most 10m)")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return flagError(fs, err)
	}
	cmd := fs.Args()
	switch {
	case *n < 1 || *n > launch.MaxLocal:
		return usagef("-n = %d; want the number of ranks to start, 1..%d", *n, launch.MaxLocal)
	case *port < 0 || *port > 65535:
		return usagef("-port = %d; want 1..65535, or 0 for a free port", *port)
	case *grace <= 0 || *grace > launch.MaxGrace:
		return usagef("-grace = %v; want more than 0 and at most %v", *grace, launch.MaxGrace)
	case len(cmd) == 0:
		return usagef("no command; usage: ppgen launch -n 4 -- ./trainer -flag ...")
	}
	// Local forwards SIGINT and SIGTERM to the ranks itself.
	err := launch.Local(context.Background(), *n, cmd, launch.LocalOptions{
		Stdout: stdout, Stderr: stderr, Port: *port, Grace: *grace,
		Logger: slog.Default(),
	})
	if err != nil {
		return &launchError{err: err, ranks: *n}
	}
	return nil
}

// launchError is an error of launch.Local as `ppgen launch` reports it:
// without the package's "launch: " prefix (run already names the command,
// "ppgen launch: "), and, when a rank could not be started for want of
// file descriptors, with a hint naming the limit and the ranks asked for.
type launchError struct {
	err   error
	ranks int // -n
}

func (e *launchError) Error() string {
	msg := strings.TrimPrefix(e.err.Error(), "launch: ")
	if errors.Is(e.err, syscall.EMFILE) || errors.Is(e.err, syscall.ENFILE) {
		msg += fmt.Sprintf("; -n %d ranks need more open files than the limit allows (the launcher holds pipes for each rank's output): raise it with ulimit -n (e.g. ulimit -n %d), or start fewer ranks", e.ranks, max(1024, 16*e.ranks))
	}
	return msg
}

func (e *launchError) Unwrap() error { return e.err }
