package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/internal/gencmd"
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
// that takes one so that they are spelled the same everywhere. Their
// definitions live in internal/gencmd, which gen/vet and ppgen diff share to
// read the invocations that generated files and //go:generate lines record.
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
	commOrder  string
	in         string
	mem        float64
	autoCost   string // -cost of the commands where it is auto's cost model
	fsdp       int
	prefetch   int // -fsdp-prefetch
	swap       int
	shipLabels bool // -ship-labels
}

// register defines the schedule flags on fs. withIn adds -in; autoCost
// defines -cost as auto's cost model (commands that simulate define their
// own -cost and pass it to auto with useCost).
func (f *scheduleFlags) register(fs *flag.FlagSet, withIn, autoCost bool) {
	v := gencmd.ScheduleVars{
		Schedule: &f.schedule, Ranks: &f.ranks, Virtual: &f.virtual, Micro: &f.micro,
		Placement: &f.placement, LessMemory: &f.lessMemory, Split: &f.split, Overlap: &f.overlap,
		DxDw: &f.dxdw, CommOrder: &f.commOrder, Mem: &f.mem, FSDP: &f.fsdp, FSDPPrefetch: &f.prefetch, Swap: &f.swap,
		ShipLabels: &f.shipLabels,
	}
	if withIn {
		v.In = &f.in
	}
	if autoCost {
		v.AutoCost = &f.autoCost
	}
	gencmd.RegisterSchedule(fs, v)
}

// values returns the flags as gencmd holds them.
func (f *scheduleFlags) values() gencmd.Schedule {
	return gencmd.Schedule{
		Name: f.schedule, Ranks: f.ranks, Virtual: f.virtual, Micro: f.micro, Placement: f.placement,
		LessMemory: f.lessMemory, Split: f.split, Overlap: f.overlap, DxDwInOverlap: f.dxdw,
		CommOrder: f.commOrder, In: f.in, Mem: f.mem, AutoCost: f.autoCost, FSDP: f.fsdp, FSDPPrefetch: f.prefetch, Swap: f.swap,
		ShipLabels: f.shipLabels,
	}
}

// useCost makes the command's own -cost spec auto's cost model too, when
// the schedule is auto.
func (f *scheduleFlags) useCost(spec string) {
	if f.schedule == gen.Auto {
		f.autoCost = spec
	}
}

// config turns the flags into an ir.Config, checking what can be checked here.
func (f *scheduleFlags) config() (ir.Config, error) { return f.values().Config() }

// lowerOptions turns the flags into lowering options.
func (f *scheduleFlags) lowerOptions() (gen.Options, error) { return f.values().LowerOptions() }

// invocation renders the flags that were set, in a fixed order, for headers.
func invocation(cmd string, fs *flag.FlagSet) string { return gencmd.Invocation(cmd, fs) }

// readInput reads a schedule file: CSV (PyTorch form) when it has commas or a
// .csv suffix, the text form otherwise.
func readInput(path string) (ir.Program, error) { return gencmd.ReadProgram(path) }

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
