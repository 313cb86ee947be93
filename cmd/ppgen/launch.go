package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/ppgen/ppgen/runtime/launch"
)

// runLaunch starts N local processes of a command as the ranks of one job,
// with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and PPGEN_TOKEN set, prefixes
// their output with "[rank N] ", and fails naming the first rank that fails.
func runLaunch(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("launch", flag.ContinueOnError)
	n := fs.Int("n", 0, "number of ranks (processes) to start")
	port := fs.Int("port", 0, "MASTER_PORT (0: a free port)")
	grace := fs.Duration("grace", 10*time.Second, "how long the other ranks may take to exit after one fails before they are killed")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return flagError(fs, err)
	}
	cmd := fs.Args()
	if *n < 1 {
		return usagef("-n = %d; want the number of ranks to start (at least 1)", *n)
	}
	if len(cmd) == 0 {
		return usagef("no command; usage: ppgen launch -n 4 -- ./trainer -flag ...")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return launch.Local(ctx, *n, cmd, launch.LocalOptions{
		Stdout: stdout, Stderr: stderr, Port: *port, Grace: *grace,
		Logger: slog.Default(),
	})
}
