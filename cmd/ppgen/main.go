// Command ppgen compiles pipeline-parallel training schedules ahead of time.
//
// It computes the exec order of every rank for a schedule family, lowers it
// with data loads, transfers and buffer slots, proves it deadlock-free under
// rendezvous semantics, simulates it, and emits Go source: one straight-line
// function per rank that links against github.com/ppgen/ppgen/runtime/pipe.
//
// Usage:
//
//	ppgen <command> [flags]
//
// Commands:
//
//	list     schedule families and their constraints
//	show     print the lowered program (or -compute-only order) as text or CSV
//	verify   prove a schedule safe; exit 1 with the diagnosis when it is not
//	sim      simulate with a cost model: makespan, bubbles, busy time, peak memory
//	gen      verify, then write the Go source of a schedule
//	version  print the runtime API version generated code needs
//
// Schedule flags, the same for every command that takes a schedule:
//
//	-schedule NAME     family (see `ppgen list`)
//	-ranks P           pipeline ranks
//	-virtual V         virtual stages per rank (0: the family's default)
//	-micro M           micro-batches per iteration
//	-placement X       loop, v, or a stage->rank table such as 0,1,1,0
//	-less-memory       interleaved: smaller warm-up
//	-split             split B into I and W
//	-overlap           pair a backward with the next forward
//	-dxdw-in-overlap   run the paired backward as I then W
//	-in FILE           (verify, sim, show, gen) read a schedule from a CSV in
//	                   PyTorch's form, or from ppgen's text form, instead
//
// show:   -compute-only  print only F, B, I, W steps; -format text|csv
//
// sim:    -cost F=1,B=2,W=1,comm=0 (B is the full backward, I = B - W unless
// I= is given; per-stage lists like F=1:1:1:1.4), -json, -grid
//
// gen:    -o FILE (default $GOFILE with _gen.go, or stdout with -o -),
// -package NAME (default $GOPACKAGE, else the output directory's name),
// -table (also emit the program as data for the interpreter),
// -helper N (steps per helper function)
//
// Exit status: 0 success; 1 the schedule is unsafe (verify, check) or
// differs (diff); 2 bad input or any other error, with a one-line reason on
// stderr and nothing written.
//
// From //go:generate in a trainer package:
//
//	//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8
//
// writes schedule_gen.go (named after $GOFILE) in package $GOPACKAGE; add
// `tool github.com/ppgen/ppgen/cmd/ppgen` to the trainer's go.mod (Go 1.24+).
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"list", "schedule families and their constraints", runList},
		{"show", "print the lowered program as text or CSV", runShow},
		{"verify", "prove a schedule safe (exit 1 with the diagnosis when not)", runVerify},
		{"sim", "simulate a schedule with a cost model", runSim},
		{"gen", "verify, then write the Go source of a schedule", runGen},
	}
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one ppgen invocation and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		var unsafe unsafeError
		switch {
		case err == nil, errors.Is(err, errHelp):
			return 0
		case errors.As(err, &unsafe):
			fmt.Fprintf(stderr, "ppgen %s: %v\n", c.name, err)
			return 1
		default:
			fmt.Fprintf(stderr, "ppgen %s: %v\n", c.name, err)
			return 2
		}
	}
	fmt.Fprintf(stderr, "ppgen: unknown command %q; run `ppgen help` for the list\n", args[0])
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ppgen <command> [flags]   (ppgen <command> -h for its flags)")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
}
