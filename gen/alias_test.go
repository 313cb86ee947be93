package gen

import (
	"bytes"
	"testing"

	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
)

// TestGenerateAlias: gen's API takes PyTorch's name of a family and
// generates what the family's own name does, byte for byte, with the
// family's name in Spec.Schedule and the result's Config.
func TestGenerateAlias(t *testing.T) {
	for _, tc := range []struct{ alias, family string }{
		{"ScheduleZBVZeroBubble", "zbv"},
		{"Interleaved1F1B", "interleaved"},
	} {
		cfg := ir.Config{Ranks: 2, Micro: 4}
		cfg.Schedule = tc.alias
		got, res, err := Generate(cfg, Options{}, emit.Options{Package: "p"})
		if err != nil {
			t.Fatalf("%s: %v", tc.alias, err)
		}
		cfg.Schedule = tc.family
		want, _, err := Generate(cfg, Options{}, emit.Options{Package: "p"})
		if err != nil {
			t.Fatalf("%s: %v", tc.family, err)
		}
		if res.Config.Schedule != tc.family {
			t.Errorf("%s: Config.Schedule = %q, want %q", tc.alias, res.Config.Schedule, tc.family)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("-schedule %s generates other code than %s", tc.alias, tc.family)
		}
		if !bytes.Contains(got, []byte("Schedule:    \""+tc.family+"\",")) {
			t.Errorf("%s: Spec.Schedule is not %q:\n%.600s", tc.alias, tc.family, got)
		}
	}
}
