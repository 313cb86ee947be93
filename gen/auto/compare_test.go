package auto

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/pricing"
)

// TestCompare: the families of a -compare list are lowered and simulated
// side by side. At P=4, M=8 and F=1, B=2 both 1F1B and GPipe take
// (M+P-1)·(F+B) = 33; GPipe holds all M = 8 micro-batches live on rank 0,
// 1F1B P = 4.
func TestCompare(t *testing.T) {
	entries, err := ParseCompare("gpipe, 1f1b:1")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	rows, err := Compare(entries, CompareOptions{
		Setup: func(e CompareEntry) (ir.Config, Options, error) {
			return ir.Config{Schedule: e.Family.Name, Ranks: 4, Virtual: e.Virtual, Micro: 8}, Options{}, nil
		},
		Pricing:  pricing.New("", nil, ""),
		Progress: func(name string, done int) { seen = append(seen, name) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(seen, ",") != "gpipe,1f1b" || len(rows) != 2 {
		t.Fatalf("progress %q, %d rows", seen, len(rows))
	}
	for i, want := range []struct {
		name      string
		makespan  float64
		actMemory float64
	}{{"gpipe", 33, 8}, {"1f1b", 33, 4}} {
		if got := rows[i]; got.Schedule != want.name || got.Makespan != want.makespan || got.ActivationMemory != want.actMemory {
			t.Errorf("row %d: %s makespan %g act mem %g; want %s %g %g", i, got.Schedule, got.Makespan, got.ActivationMemory, want.name, want.makespan, want.actMemory)
		}
	}
	for _, tc := range []struct{ list, want string }{
		{"1f1b,zbv:x", "NAME:V"},
		{",", "list of schedules"},
		{"nope", "unknown schedule"},
		{"1f1b,nope", `-compare: unknown schedule "nope"; want families from 1f1b, `},
		// auto picks one family: it is not one to compare, and no list
		// the error prints offers it.
		{"auto,1f1b", `-compare: "auto": auto cannot be one of the compared schedules; use -schedule auto`},
		{"1f1b,auto:2", `-compare: "auto:2": auto cannot be one of the compared schedules`},
	} {
		if _, err := ParseCompare(tc.list); err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), ", auto") {
			t.Errorf("%q: %v; want %q, and no list that offers auto", tc.list, err, tc.want)
		}
	}
}
