package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ppgen/ppgen/gen/auto"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/gencmd"
)

// usagef returns bad input (a *gencmd.UsageError): the command exits 2 with
// a one-line reason.
func usagef(format string, args ...any) error {
	return &gencmd.UsageError{Msg: fmt.Sprintf(format, args...)}
}

// setFlags returns the names of the flags of fs the user set (fs.Visit),
// for refusing a flag that does not apply rather than ignoring it.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// checkMaxActivations checks -max-activations: 0 (no limit) or a positive
// limit.
func checkMaxActivations(n int) error {
	if n < 0 {
		return usagef("-max-activations %d; want 0 (no limit) or a positive number of live activations (chunks) per rank", n)
	}
	return nil
}

// unsafeError marks a program that is not safe (verify) or output that differs (diff): exit 1.
type unsafeError struct{ err error }

func (e unsafeError) Error() string { return e.err.Error() }
func (e unsafeError) Unwrap() error { return e.err }

// newRequest returns the flag set of command name with the flags of which
// bound to a new request (gen/gencmd holds their only definitions, so that
// they are spelled and mean the same in every command, and in the
// invocations that generated files and //go:generate lines record).
func newRequest(name string, which gencmd.Flags) (*gencmd.Request, *flag.FlagSet) {
	req := new(gencmd.Request)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	req.Bind(fs, which)
	return req, fs
}

// commandLine is the command line of fs as a file this command writes
// records it (a trace's and a report's Command): the flags that were set,
// after "ppgen" and the command's name (emit.Invocation).
func commandLine(fs *flag.FlagSet) string {
	return emit.Invocation(fs.Name(), fs, nil)
}

// lower builds and lowers the schedule of req, or its -in file; pr (nil:
// none) shows which family -schedule auto is trying.
func lower(req *gencmd.Request, pr *progress) (auto.Result, error) {
	pr.Phase("lowering")
	showAuto(req, pr)
	return req.Lower()
}

// checkOut checks an -o that defaults to standard output.
func checkOut(out string) error {
	if out == "" {
		return usagef("-o needs a file name (or - for stdout)")
	}
	return nil
}

// showAuto makes pr (nil: none) show the step -schedule auto is on, and
// how many of its steps are done.
func showAuto(req *gencmd.Request, pr *progress) {
	if req.Schedule == auto.Name && pr != nil {
		req.AutoProgress = func(step string, done, total int) {
			pr.Count(done, total)
			pr.Phase("auto: %s", step)
		}
	}
}

// parseFlags parses args, mapping flag errors to usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return flagError(fs, err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (flags go before arguments; see `ppgen %s -h`)", fs.Arg(0), fs.Name())
	}
	return nil
}

var errHelp = errors.New("help shown")
