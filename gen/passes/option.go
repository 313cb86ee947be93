package passes

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
)

// Option is a user-visible lowering option that the pass it switches on
// declares in its own file (recompute.go's -recompute), so that a new
// option touches neither lower.go nor the command line (gen/gencmd binds a
// flag for every Declared option and hands the values over in
// Options.Set). Its value is a string: "" is off.
//
// Registration is the least machinery that keeps a new pass in one file:
// the pass file calls declare from an init function. Nothing depends on the
// order of the init functions: Declared sorts by Name, and Pipeline places
// each pass by Before.
type Option struct {
	// Name is the flag's name (-Name) and the option's key in Options.Set.
	Name string
	// Usage is the flag's help text.
	Usage string
	// Before names the pass of Pipeline this option's pass runs right
	// before ("slots", which stays last).
	Before string
	// Check validates a value as the flag is read; nil accepts any.
	Check func(value string) error
	// Run is the pass, for a value that is set (not ""), under the
	// options of the whole lowering (its cost model: opt.Comm.Cost).
	Run func(p ir.Program, value string, opt Options) (ir.Program, error)
}

// declared holds the options the pass files declare (declare).
var declared []*Option

// declare adds o to the options Declared returns; pass files call it from
// an init function.
func declare(o *Option) {
	declared = append(declared, o)
}

// Declared returns the options the passes declare, sorted by Name. The
// caller may keep the slice; its Options are shared.
func Declared() []*Option {
	out := slices.Clone(declared)
	slices.SortFunc(out, func(a, b *Option) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// declaredOption returns the declared option name, or nil.
func declaredOption(name string) *Option {
	for _, o := range declared {
		if o.Name == name {
			return o
		}
	}
	return nil
}

// checkSet checks the values of opt.Set: each names a declared option and
// passes its Check.
func checkSet(set map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(set)) {
		o := declaredOption(name)
		if o == nil {
			var names []string
			for _, d := range Declared() {
				names = append(names, d.Name)
			}
			return fmt.Errorf("unknown lowering option %q; the passes declare %s", name, strings.Join(names, ", "))
		}
		if v := set[name]; v != "" && o.Check != nil {
			if err := o.Check(v); err != nil {
				return fmt.Errorf("-%s %s: %w", name, v, err)
			}
		}
	}
	return nil
}

// withDeclared inserts, into ps, the pass of every declared option set in
// opt.Set (in Name order), each right before the pass its Before names.
func withDeclared(ps []Pass, opt Options) []Pass {
	for _, o := range Declared() {
		v := opt.Set[o.Name]
		if v == "" {
			continue
		}
		at := slices.IndexFunc(ps, func(p Pass) bool { return p.Name == o.Before })
		if at < 0 {
			at = len(ps)
		}
		run := o.Run
		ps = slices.Insert(ps, at, Pass{Name: o.Name, Run: func(p ir.Program) (ir.Program, error) { return run(p, v, opt) }})
	}
	return ps
}
