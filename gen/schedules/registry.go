// Package schedules holds ppgen's schedule families, one file per family,
// and a registry by name. A family turns a Config into the compute-only
// order of every rank (F, B, I, W and overlap steps); the passes in
// gen/passes add transfers, data loads and slots.
package schedules

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
)

// Family is one schedule family.
type Family struct {
	// Name is the registry key used on the command line ("1f1b", "zbv", ...).
	Name string
	// Aliases are other names of the family that Lookup accepts: PyTorch's
	// and torchtitan's ("Interleaved1F1B" for PyTorch's
	// ScheduleInterleaved1F1B). They match without regard to case and with
	// or without PyTorch's "Schedule" prefix; what is recorded (Spec.Schedule,
	// reports) is always Name.
	Aliases []string
	// Summary is one line for `ppgen list`.
	Summary string
	// Constraints states, in words, which P, V and M the family accepts.
	Constraints string
	// DefaultVirtual is the V used when the config leaves it 0.
	DefaultVirtual int
	// ComputeOnly, when set, says why the family's compute order cannot be
	// lowered yet (gen.Lower refuses it with this reason); the order itself
	// is still built, verified by the family's tests and printable.
	ComputeOnly string
	// UsesCost says the family's order depends on cfg.Cost (the cost model
	// it is built for): gen/gencmd then fills cfg.Cost from -cost or -model.
	UsesCost bool
	// OwnedData says the family loads micro-batches on their owner ranks
	// (mpipe): gen.Lower runs the passes.OwnedData pass for it.
	OwnedData bool
	// Build returns the compute-only program, or a *ConstraintError for
	// values the family does not accept. Register wraps the family's own
	// Build in Normalize, so every call checks P, V, M ≥ 1 and the size
	// limits first, in that one place, and the family's code may assume
	// them.
	Build func(cfg ir.Config) (ir.Program, error)
	// Reference, when set, builds an order the family's own must never be
	// slower than once both are lowered and simulated under the cost model
	// (interleaved-zb: PyTorch's ScheduleInterleavedZeroBubble order). The
	// family judges its candidates compute-only; gen.LowerFamily lowers
	// this one too and keeps it where the lowered program runs faster. cfg
	// is normalized, as BuildConfig returns it.
	Reference func(cfg ir.Config) (ir.Program, error)
	// own is the family's own Build, before Register wraps it
	// (BuildConfig normalizes once and calls it).
	own func(cfg ir.Config) (ir.Program, error)
}

var (
	registry = map[string]*Family{}
	// byKey maps the matching key (aliasKey) of every family name and
	// alias to the family's name.
	byKey = map[string]string{}
)

// Register adds a family; it panics on a duplicate name or alias (a
// programming error caught by any test run, never user input).
func Register(f Family) {
	if _, dup := registry[f.Name]; dup {
		panic("schedules: duplicate family " + f.Name)
	}
	for _, n := range append([]string{f.Name}, f.Aliases...) {
		k := aliasKey(n)
		if other, dup := byKey[k]; dup && other != f.Name {
			panic("schedules: " + n + " names both " + other + " and " + f.Name)
		}
		byKey[k] = f.Name
	}
	build := f.Build
	f.own = build
	f.Build = func(cfg ir.Config) (ir.Program, error) {
		cfg, err := normalize(f, cfg)
		if err != nil {
			return ir.Program{}, err
		}
		return build(cfg)
	}
	registry[f.Name] = &f
}

// pytorchPrefix starts the names of PyTorch's schedule classes
// (ScheduleGPipe); torchtitan's configuration names them without it.
const pytorchPrefix = "schedule"

// aliasKey is what names match by: lower case, without PyTorch's
// "Schedule" prefix.
func aliasKey(name string) string {
	k := strings.ToLower(name)
	if rest, ok := strings.CutPrefix(k, pytorchPrefix); ok && rest != "" {
		k = rest
	}
	return k
}

// Canonical returns the family name that name denotes: a family's name as
// it is, or one of its names in another case, with PyTorch's "Schedule"
// prefix, or an alias (ScheduleInterleaved1F1B, Interleaved1F1B and
// interleaved1f1b are all "interleaved"). ok is false when name denotes no
// family; "auto", which is gen's, is not one.
func Canonical(name string) (canonical string, ok bool) {
	if _, ok := registry[name]; ok {
		return name, true
	}
	canonical, ok = byKey[aliasKey(name)]
	return canonical, ok
}

// Lookup returns the family that name denotes (Canonical: its name or an
// alias), or an error listing the known ones.
func Lookup(name string) (Family, error) {
	f, err := Resolve(name)
	if err != nil {
		return Family{}, err
	}
	return *f, nil
}

// Resolve is Lookup for a caller that keeps the family it resolved (a
// command line's -schedule): the registered family itself, the same
// pointer at every call for one family. It must not be modified.
func Resolve(name string) (*Family, error) {
	canonical, ok := Canonical(name)
	if !ok {
		// "auto" is gen/auto's: it picks one of these by simulation.
		return nil, fmt.Errorf("unknown schedule %q; known schedules: %s, auto, and PyTorch's and torchtitan's names for them (see `ppgen list`)", name, strings.Join(Names(), ", "))
	}
	return registry[canonical], nil
}

// Names returns the registered family names in sorted order.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// All returns every family sorted by name.
func All() []Family {
	out := make([]Family, 0, len(registry))
	for _, n := range Names() {
		out = append(out, *registry[n])
	}
	return out
}

// Normalize fills defaults (V from the family), replaces an alias in
// cfg.Schedule by the family's name, and checks the values every family
// needs: P ≥ 1, V ≥ 1, M ≥ 1.
func Normalize(cfg ir.Config) (ir.Config, Family, error) {
	f, err := Lookup(cfg.Schedule)
	if err != nil {
		return cfg, f, err
	}
	cfg, err = f.Normalize(cfg)
	return cfg, f, err
}

// Normalize is Normalize for a family already looked up (Lookup): it
// sets cfg.Schedule to the family's name, fills V and checks P, V, M.
func (f Family) Normalize(cfg ir.Config) (ir.Config, error) {
	cfg.Schedule = f.Name
	return normalize(f, cfg)
}

// BuildConfig is Build for a family already looked up, normalizing cfg
// once (Normalize) and returning it with the order: cfg.Schedule becomes
// the family's name.
func (f Family) BuildConfig(cfg ir.Config) (ir.Config, ir.Program, error) {
	cfg, err := f.Normalize(cfg)
	if err != nil {
		return cfg, ir.Program{}, err
	}
	build := f.own
	if build == nil { // a Family value not from Register: its Build as given
		build = f.Build
	}
	p, err := build(cfg) // the family checks cfg.Placement
	return cfg, p, err
}

// normalize is Normalize for family f: the only check of P, V, M ≥ 1.
func normalize(f Family, cfg ir.Config) (ir.Config, error) {
	if cfg.Virtual == 0 {
		cfg.Virtual = f.DefaultVirtual
		if cfg.Virtual == 0 {
			cfg.Virtual = 1
		}
	}
	switch {
	case cfg.Ranks < 1:
		return cfg, &ConstraintError{Schedule: f.Name, Param: "ranks", Value: cfg.Ranks, Want: "at least 1 rank"}
	case cfg.Virtual < 1:
		return cfg, &ConstraintError{Schedule: f.Name, Param: "virtual", Value: cfg.Virtual, Want: "at least 1 stage per rank"}
	case cfg.Micro < 1:
		return cfg, &ConstraintError{Schedule: f.Name, Param: "micro", Value: cfg.Micro, Want: "at least 1 micro-batch"}
	}
	if err := checkSize(f.Name, cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// checkSize checks a config against the size limits of gen/ir before
// anything is built: P ≤ ir.MaxIndex+1 ranks, P·V ≤ ir.MaxIndex+1 stages,
// M ≤ ir.MaxIndex+1 micro-batches and P·V·M ≤ ir.MaxChunks chunks. Every
// table the passes, verify and the simulator allocate is sized by these
// (steps are a few per chunk), so they bound time and memory, not only
// the chunk count. It assumes P, V, M ≥ 1 and cannot overflow.
func checkSize(name string, cfg ir.Config) error {
	const bits = "runtime/pipe numbers ranks, stages and micro-batches in 16 bits"
	n := ir.MaxIndex + 1
	switch {
	case cfg.Ranks > n:
		return &ConstraintError{Schedule: name, Param: "ranks", Value: cfg.Ranks, Want: fmt.Sprintf("at most %d ranks (%s)", n, bits)}
	case cfg.Virtual > n/cfg.Ranks:
		return &ConstraintError{Schedule: name, Param: "virtual", Value: cfg.Virtual,
			Want: fmt.Sprintf("ranks × virtual ≤ %d stages (got ranks %d; %s)", n, cfg.Ranks, bits)}
	case cfg.Micro > n:
		return &ConstraintError{Schedule: name, Param: "micro", Value: cfg.Micro, Want: fmt.Sprintf("at most %d micro-batches (%s)", n, bits)}
	case cfg.Ranks*cfg.Virtual > ir.MaxChunks:
		param, v := "ranks", cfg.Ranks
		if cfg.Virtual > 1 {
			param, v = "virtual", cfg.Virtual
		}
		return &ConstraintError{Schedule: name, Param: param, Value: v,
			Want: fmt.Sprintf("ranks × virtual × micro ≤ %d chunks, ppgen's size limit (ranks %d × virtual %d = %d stages already exceed it at one micro-batch)",
				ir.MaxChunks, cfg.Ranks, cfg.Virtual, cfg.Ranks*cfg.Virtual)}
	case cfg.Micro > ir.MaxChunks/(cfg.Ranks*cfg.Virtual):
		return &ConstraintError{Schedule: name, Param: "micro", Value: cfg.Micro,
			Want: fmt.Sprintf("ranks × virtual × micro ≤ %d chunks, ppgen's size limit (got ranks %d, virtual %d: at most %d micro-batches)",
				ir.MaxChunks, cfg.Ranks, cfg.Virtual, ir.MaxChunks/(cfg.Ranks*cfg.Virtual))}
	}
	return nil
}

// Build normalizes the config and builds the family's compute-only program.
func Build(cfg ir.Config) (ir.Program, error) {
	cfg, f, err := Normalize(cfg)
	if err != nil {
		return ir.Program{}, err
	}
	return f.Build(cfg)
}

// ConstraintError says which value a family rejects and what would work.
type ConstraintError struct {
	Schedule string
	Param    string // "ranks", "virtual", "micro", "placement", an option name
	Value    int
	Want     string // what would work, e.g. "an even number (try 8 or 10)"
	// Got, when non-empty, is the rejected value in words ("v", "on") for a
	// parameter that is not a number; it is printed instead of Value.
	Got string
}

func (e *ConstraintError) Error() string {
	if e.Got != "" {
		return fmt.Sprintf("schedule %s: %s = %s is not supported; want %s", e.Schedule, e.Param, e.Got, e.Want)
	}
	return fmt.Sprintf("schedule %s: %s = %d is not supported; want %s", e.Schedule, e.Param, e.Value, e.Want)
}
