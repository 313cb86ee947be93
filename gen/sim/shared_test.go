package sim

import (
	"math"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestSharing: the ranks computing during each event, worked by hand: two
// ranks' calls overlapping by half, a third rank's inside one of them,
// and events that are not compute.
func TestSharing(t *testing.T) {
	f := ir.Step{Kind: ir.Forward}
	evs := []Event{
		{Rank: 0, Step: f, Start: 0, End: 4},                       // rank 1's [2, 6) covers half, rank 2's [1, 2) a quarter
		{Rank: 1, Step: f, Start: 2, End: 6},                       // rank 0's [2, 4) half
		{Rank: 2, Step: f, Start: 1, End: 2},                       // rank 0's all of it
		{Rank: 0, Step: f, Start: 9, End: 9},                       // empty
		{Rank: 1, Step: ir.Step{Kind: ir.SendF}, Start: 0, End: 6}, // not compute
	}
	want := []float64{1.75, 1.5, 2, 1, -1}
	got := Sharing(evs)
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("event %d: %g ranks, want %g", i, got[i], want[i])
		}
	}
}

// TestRunShared: with as many cores as ranks it is Run; GPipe's forwards
// at P=2 on one core, each rank's steps overlapping the other's by all
// but the first and last, take longer, and the makespan lies between
// Run's and the steps' sum run one after the other; fewer than one core
// is refused.
func TestRunShared(t *testing.T) {
	p := gpipe(2, 4)
	c := Cost{}
	alone, err := Run(p, c)
	if err != nil {
		t.Fatal(err)
	}
	two, err := RunShared(p, c, 2)
	if err != nil || two.Makespan != alone.Makespan {
		t.Errorf("2 cores for 2 ranks: %g, %v; want Run's %g", two.Makespan, err, alone.Makespan)
	}
	one, err := RunShared(p, c, 1)
	if err != nil {
		t.Fatal(err)
	}
	serial := 2 * 4 * (1 + 2.0) // every step of both ranks one after the other
	if !(one.Makespan > alone.Makespan && one.Makespan <= serial+1e-9) {
		t.Errorf("1 core: makespan %g; want above Run's %g and at most the serial %g", one.Makespan, alone.Makespan, serial)
	}
	if _, err := RunShared(p, c, 0); err == nil || !strings.Contains(err.Error(), "cores") {
		t.Errorf("0 cores: err = %v; want one about cores", err)
	}
}
