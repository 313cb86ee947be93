package sim

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// FuzzParseCost: ParseCost never panics, and what it accepts round-trips:
// the String form parses back to a cost with the same value for every key
// and stage, and prints the same. The seeds include values that once gave
// +Inf and NaN (F=1e308) and keys left out (F=1,B=2 once set W=0).
func FuzzParseCost(f *testing.F) {
	for _, s := range []struct {
		spec   string
		stages int
	}{
		{"", 0}, {"F=1,B=2,W=1,comm=0", 4}, {"F=1,B=2", 4}, {"B=3", 0}, {"I=1.5,W=0.5", 2},
		{"F=1:1:1:1.4,B=2", 4}, {"act=1:2,bw=4", 2}, {"overlap=0.5,data=1,unshard=1,reduce=1,opt=1,swap=1", 1}, {"param=2:4,bw=1,dp=4,comm=0.1", 2}, {"dp=3", 0},
		{"F=1e308,B=1e308", 0}, {"comm=NaN", 0}, {"F=Inf", 0}, {"B=0.5", 0}, {"bw=1e-300,act=1", 0},
		{"F=" + strings.Repeat("1:", 100) + "1", 0}, {"F=1,F=2", 0}, {"X=1", 0},
		{"F=1,B=2,R=0.5:1.5", 2}, {"R=0", 0}, {"pre=0.25,preb=0.5", 0}, {"preb=-1", 0}, {"allreduce=1,opt=0.5", 1},
	} {
		f.Add(s.spec, s.stages)
	}
	f.Fuzz(func(t *testing.T, spec string, stages int) {
		c, err := ParseCost(spec, stages)
		if err != nil {
			return
		}
		out := c.String()
		d, err := ParseCost(out, stages)
		if err != nil {
			t.Fatalf("ParseCost(%q) = %v (from %q)", out, err, spec)
		}
		if again := d.String(); again != out {
			t.Fatalf("String %q, after a round trip %q", out, again)
		}
		n := max(len(c.F), len(d.F), len(c.Act), len(d.Act), len(c.Param), len(d.Param), 1)
		for s := range n {
			for _, k := range []string{"F", "B", "I", "W", "act", "param"} {
				if a, b := of(*c.stageField(k), s), of(*d.stageField(k), s); a != b {
					t.Fatalf("%s at stage %d: %v, after a round trip %v (%q)", k, s, a, b, out)
				}
			}
		}
		for _, k := range scalarKeys {
			if a, b := *c.scalarField(k), *d.scalarField(k); a != b {
				t.Fatalf("%s: %v, after a round trip %v (%q)", k, a, b, out)
			}
		}
		for s := range n {
			if v := c.StepCost(ir.Compute(ir.Forward, s, 0)); v != v || v > MaxCost {
				t.Fatalf("stage %d: F costs %v", s, v)
			}
		}
	})
}
