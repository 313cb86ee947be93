package schedules

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestAliases: PyTorch's schedule classes (torch.distributed.pipelining's
// ScheduleGPipe, ..., ScheduleDualPipeV) and torchtitan's names for them
// (its pipeline_parallel_schedule values) name ppgen's families, in any
// case, with or without the Schedule prefix; Lookup and Normalize take
// them, and Normalize records the family's own name.
func TestAliases(t *testing.T) {
	for _, tc := range []struct{ alias, family string }{
		{"GPipe", "gpipe"},
		{"1F1B", "1f1b"},
		{"Interleaved1F1B", "interleaved"},
		{"LoopedBFS", "looped-bfs"},
		{"InterleavedZeroBubble", "interleaved-zb"},
		{"ZBVZeroBubble", "zbv"},
		{"DualPipeV", "dualpipev"},
	} {
		for _, name := range []string{tc.alias, "Schedule" + tc.alias, strings.ToLower(tc.alias), strings.ToUpper(tc.alias), "schedule" + strings.ToLower(tc.alias)} {
			got, ok := Canonical(name)
			if !ok || got != tc.family {
				t.Errorf("Canonical(%q) = %q, %v; want %q", name, got, ok, tc.family)
			}
			f, err := Lookup(name)
			if err != nil || f.Name != tc.family {
				t.Errorf("Lookup(%q) = %q, %v; want family %q", name, f.Name, err, tc.family)
			}
			cfg, f, err := Normalize(ir.Config{Schedule: name, Ranks: 2, Micro: 4})
			if err != nil || cfg.Schedule != tc.family || f.Name != tc.family {
				t.Errorf("Normalize(-schedule %s): schedule %q, family %q, %v; want %q", name, cfg.Schedule, f.Name, err, tc.family)
			}
		}
		f, _ := Lookup(tc.family)
		found := false
		for _, a := range f.Aliases {
			found = found || a == tc.alias
		}
		if !found {
			t.Errorf("family %s does not list %s among its aliases %q (ppgen list shows them)", tc.family, tc.alias, f.Aliases)
		}
	}
	// Family names stay themselves; other names are refused.
	for _, n := range Names() {
		if got, ok := Canonical(n); !ok || got != n {
			t.Errorf("Canonical(%q) = %q, %v", n, got, ok)
		}
	}
	for _, name := range []string{"", "Schedule", "schedule", "auto", "ScheduleFoo", "PipelineScheduleSingle", "Interleaved1F1Bx", "ZeroBubble", "zbv-zb"} {
		if got, ok := Canonical(name); ok {
			t.Errorf("Canonical(%q) = %q, want no family", name, got)
		}
	}
	if _, err := Lookup("ScheduleFoo"); err == nil || !strings.Contains(err.Error(), "PyTorch's and torchtitan's names") {
		t.Errorf("Lookup(ScheduleFoo): %v; want an error that says aliases exist", err)
	}
}
