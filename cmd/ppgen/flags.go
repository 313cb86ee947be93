package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
)

// usageError marks bad input: the command exits 2 with a one-line reason.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// unsafeError marks a program that is not safe (verify) or output that differs (diff): exit 1.
type unsafeError struct{ err error }

func (e unsafeError) Error() string { return e.err.Error() }
func (e unsafeError) Unwrap() error { return e.err }

// scheduleFlags are the flags that name a schedule, shared by every command
// that takes one so that they are spelled the same everywhere.
type scheduleFlags struct {
	schedule   string
	ranks      int
	virtual    int
	micro      int
	placement  string
	lessMemory bool
	split      bool
	overlap    bool
	dxdw       bool
	in         string
}

func (f *scheduleFlags) register(fs *flag.FlagSet, withIn bool) {
	fs.StringVar(&f.schedule, "schedule", "", "schedule family (see `ppgen list`)")
	fs.IntVar(&f.ranks, "ranks", 0, "number of pipeline ranks P")
	fs.IntVar(&f.virtual, "virtual", 0, "virtual stages per rank V (0: the family's default)")
	fs.IntVar(&f.micro, "micro", 0, "number of micro-batches M")
	fs.StringVar(&f.placement, "placement", "", "stage placement: loop, v, or a stage->rank table such as 0,1,1,0 (default: the family's)")
	fs.BoolVar(&f.lessMemory, "less-memory", false, "interleaved: smaller warm-up, fewer live activations")
	fs.BoolVar(&f.split, "split", false, "split every backward B into I (input grad) and W (weight grad)")
	fs.BoolVar(&f.overlap, "overlap", false, "pair one micro-batch's backward with the next one's forward")
	fs.BoolVar(&f.dxdw, "dxdw-in-overlap", false, "inside an overlap, run the backward as I then W")
	if withIn {
		fs.StringVar(&f.in, "in", "", "read the schedule from a CSV (PyTorch form) or text file instead of -schedule")
	}
}

// config turns the flags into an ir.Config, checking what can be checked here.
func (f *scheduleFlags) config() (ir.Config, error) {
	if f.schedule == "" {
		return ir.Config{}, usagef("missing -schedule (one of the names `ppgen list` prints)")
	}
	if f.ranks < 1 {
		return ir.Config{}, usagef("-ranks = %d; want at least 1", f.ranks)
	}
	if f.micro < 1 {
		return ir.Config{}, usagef("-micro = %d; want at least 1", f.micro)
	}
	if f.virtual < 0 {
		return ir.Config{}, usagef("-virtual = %d; want 0 (the family's default) or more", f.virtual)
	}
	cfg := ir.Config{
		Schedule: f.schedule, Ranks: f.ranks, Virtual: f.virtual, Micro: f.micro,
		Options: ir.Options{LessMemory: f.lessMemory, Split: f.split, Overlap: f.overlap, DxDwInOverlap: f.dxdw},
	}
	if f.placement != "" {
		v := f.virtual
		if v == 0 {
			v = 1
		}
		pl, err := ir.ParsePlacement(f.placement, f.ranks, v)
		if err != nil {
			return ir.Config{}, usageError{err.Error()}
		}
		cfg.Placement = &pl
	}
	return cfg, nil
}

// invocation renders the flags that were set, in a fixed order, for headers.
func invocation(cmd string, fs *flag.FlagSet) string {
	parts := []string{"ppgen", cmd}
	fs.VisitAll(func(fl *flag.Flag) {
		set := false
		fs.Visit(func(v *flag.Flag) {
			if v.Name == fl.Name {
				set = true
			}
		})
		if !set || fl.Name == "o" {
			return
		}
		if bf, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			if fl.Value.String() == "true" {
				parts = append(parts, "-"+fl.Name)
			}
			return
		}
		parts = append(parts, "-"+fl.Name, fl.Value.String())
	})
	return strings.Join(parts, " ")
}

// readInput reads a schedule file: CSV (PyTorch form) when it has commas or a
// .csv suffix, the text form otherwise.
func readInput(path string) (ir.Program, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return ir.Program{}, usagef("reading -in: %v", err)
	}
	var p ir.Program
	if strings.HasSuffix(path, ".csv") || (!strings.Contains(string(data), "rank ") && strings.Contains(string(data), ",")) {
		p, err = ir.ParseCSV(strings.NewReader(string(data)))
	} else {
		p, err = ir.ParseText(string(data))
	}
	if err != nil {
		return ir.Program{}, usagef("%s: %v", path, err)
	}
	return p, nil
}

// parseFlags parses args, mapping flag errors to usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return errHelp
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (flags go before arguments; see `ppgen %s -h`)", fs.Arg(0), fs.Name())
	}
	return nil
}

var errHelp = errors.New("help shown")
