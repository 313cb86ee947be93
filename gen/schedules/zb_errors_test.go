package schedules

import (
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// zbtFamilies are the families of the zero-bubble files.
var zbtFamilies = []string{"zb-h1", "zb-h2", "interleaved-zb", "zbv", "v-half", "v-min", "dualpipe", "dualpipev"}

func TestZBConstraintErrors(t *testing.T) {
	loop := ir.Loop(4, 2)
	vee := ir.VShape(4)
	for _, c := range []struct {
		cfg   ir.Config
		param string
		value int
		want  []string // substrings of the message
	}{
		{ir.Config{Schedule: "dualpipe", Ranks: 4, Micro: 7}, "micro", 7, []string{"schedule dualpipe: micro = 7", "even M ≥ 2P = 8", "try 8 or 10"}},
		{ir.Config{Schedule: "dualpipe", Ranks: 4, Micro: 6}, "micro", 6, []string{"even M ≥ 2P = 8", "try 8 or 10"}},
		{ir.Config{Schedule: "dualpipe", Ranks: 4, Micro: 11}, "micro", 11, []string{"try 10 or 12"}},
		{ir.Config{Schedule: "dualpipe", Ranks: 3, Micro: 12}, "ranks", 3, []string{"even number of ranks", "try 2 or 4"}},
		{ir.Config{Schedule: "dualpipe", Ranks: 1, Micro: 12}, "ranks", 1, []string{"try 2"}},
		{ir.Config{Schedule: "dualpipe", Ranks: 4, Virtual: 1, Micro: 8}, "virtual", 1, []string{"virtual = 2"}},
		{ir.Config{Schedule: "dualpipe", Ranks: 4, Micro: 8, Placement: &loop}, "placement", 0, []string{"dualpipe table"}},
		{ir.Config{Schedule: "dualpipev", Ranks: 4, Micro: 7}, "micro", 7, []string{"M ≥ 2P = 8", "try 8"}},
		{ir.Config{Schedule: "dualpipev", Ranks: 4, Micro: 8, Placement: &loop}, "placement", 0, []string{"v (rank r holds stages r and 7-r)"}},
		{ir.Config{Schedule: "zbv", Ranks: 4, Virtual: 3, Micro: 8}, "virtual", 3, []string{"virtual = 2"}},
		{ir.Config{Schedule: "v-half", Ranks: 4, Virtual: 1, Micro: 8}, "virtual", 1, []string{"virtual = 2"}},
		{ir.Config{Schedule: "v-min", Ranks: 4, Micro: 8, Placement: &loop}, "placement", 0, []string{"supports only that placement"}},
		{ir.Config{Schedule: "zb-h1", Ranks: 4, Virtual: 2, Micro: 8}, "virtual", 2, []string{"virtual = 1", "interleaved-zb"}},
		{ir.Config{Schedule: "zb-h2", Ranks: 4, Virtual: 2, Micro: 8}, "virtual", 2, []string{"virtual = 1"}},
		{ir.Config{Schedule: "zb-h1", Ranks: 4, Micro: 8, Options: ir.Options{LessMemory: true}}, "less-memory", 1, []string{"less-memory = on"}},
		{ir.Config{Schedule: "zbv", Ranks: 4, Micro: 8, Options: ir.Options{LessMemory: true}}, "less-memory", 1, []string{"interleaved-zb only"}},
		{ir.Config{Schedule: "interleaved-zb", Ranks: 4, Micro: 8, Placement: &vee}, "placement", 0, []string{"loop (stage s on rank s mod 4)"}},
		{ir.Config{Schedule: "interleaved-zb", Ranks: 1 << 10, Virtual: 1 << 10, Micro: 2}, "virtual", 1 << 10, []string{"ranks × virtual ≤ 65535 stages"}},
		{ir.Config{Schedule: "interleaved-zb", Ranks: 1 << 8, Virtual: 4, Micro: 65}, "micro", 65, []string{"ranks × virtual × micro ≤ 32768", "at most 32 micro-batches"}},
		{ir.Config{Schedule: "zb-h1", Ranks: 1 << 20, Micro: 1 << 20}, "ranks", 1 << 20, []string{"at most 65535 ranks"}},
		{ir.Config{Schedule: "zb-h1", Ranks: 70000, Micro: 2}, "ranks", 70000, []string{"at most 65535 ranks"}},
		{ir.Config{Schedule: "zbv", Ranks: 2, Micro: 1 << 40}, "micro", 1 << 40, []string{"at most 65535 micro-batches"}},
		{ir.Config{Schedule: "zbv", Ranks: 0, Micro: 8}, "ranks", 0, []string{"at least 1 rank"}},
		{ir.Config{Schedule: "v-min", Ranks: 2, Micro: -3}, "micro", -3, []string{"at least 1 micro-batch"}},
	} {
		_, err := Build(c.cfg)
		var ce *ConstraintError
		if !errors.As(err, &ce) {
			t.Errorf("%s P=%d V=%d M=%d: error %v, want a *ConstraintError", c.cfg.Schedule, c.cfg.Ranks, c.cfg.Virtual, c.cfg.Micro, err)
			continue
		}
		if ce.Schedule != c.cfg.Schedule || ce.Param != c.param || (c.param != "placement" && ce.Value != c.value) {
			t.Errorf("%s: error names %s %s = %d, want %s %s = %d (%v)", c.cfg.Schedule, ce.Schedule, ce.Param, ce.Value, c.cfg.Schedule, c.param, c.value, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.cfg.Schedule, err, w)
			}
		}
	}
}

// Placement overrides equal to the family's own are accepted; dualpipe takes
// the v table (its own is the same table under another name).
func TestZBPlacementOverride(t *testing.T) {
	vee, loop := ir.VShape(4), ir.Loop(4, 1)
	for _, c := range []ir.Config{
		{Schedule: "dualpipe", Ranks: 4, Micro: 8, Placement: &vee},
		{Schedule: "dualpipev", Ranks: 4, Micro: 8, Placement: &vee},
		{Schedule: "zbv", Ranks: 4, Micro: 8, Placement: &vee},
		{Schedule: "zb-h1", Ranks: 4, Micro: 8, Placement: &loop},
	} {
		if _, err := Build(c); err != nil {
			t.Errorf("%s with its own placement: %v", c.Schedule, err)
		}
	}
	prog := zbtBuild(t, "dualpipe", 4, 2, 8, ir.Options{})
	if prog.Placement.Name != "dualpipe" || prog.Placement.String() != "0,1,2,3,3,2,1,0" {
		t.Errorf("dualpipe placement %q (%s), want the dualpipe table 0,1,2,3,3,2,1,0", prog.Placement.Name, prog.Placement)
	}
}

// Build functions called directly (without Normalize) with any values return
// a program or an error, never panic, and finish quickly even at the chunk
// bound (P = 2^20 ranks with one micro-batch, or one rank with 2^20).
func TestZBNoPanics(t *testing.T) {
	odd := ir.Placement{Name: "table", NumRanks: 3, RankOf: []int{0, 5, -1}}
	short := ir.VShape(2)
	values := []int{-1 << 62, -1, 0, 1, 2, 3, 7, 1 << 20, 1 << 62}
	for _, name := range zbtFamilies {
		f, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range values {
			for _, v := range values[:7] {
				for _, m := range values {
					for _, pl := range []*ir.Placement{nil, &odd, &short} {
						cfg := ir.Config{Schedule: name, Ranks: p, Virtual: v, Micro: m, Placement: pl}
						func() {
							defer func() {
								if e := recover(); e != nil {
									t.Errorf("%s P=%d V=%d M=%d: panic %v", name, p, v, m, e)
								}
							}()
							prog, err := f.Build(cfg)
							if err == nil && prog.NumSteps() <= 1<<14 {
								if cerr := zbtCheck(prog, zbtSpanOf(name, prog)); cerr != nil {
									t.Errorf("%s P=%d V=%d M=%d: accepted an infeasible program: %v", name, p, v, m, cerr)
								}
							}
						}()
					}
				}
			}
		}
	}
}

func TestZBRegistry(t *testing.T) {
	for _, name := range zbtFamilies {
		f, err := Lookup(name)
		if err != nil {
			t.Errorf("%s not registered: %v", name, err)
			continue
		}
		if f.Summary == "" || f.Constraints == "" || f.DefaultVirtual < 1 || f.Build == nil {
			t.Errorf("%s: incomplete family %+v", name, f)
		}
	}
}
