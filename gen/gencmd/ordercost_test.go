package gencmd

import (
	"flag"
	"github.com/ppgen/ppgen/gen/auto"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// simRequest binds the flags of a command that simulates (sim, trace,
// report) and parses args.
func simRequest(t *testing.T, args ...string) *Request {
	t.Helper()
	r := &Request{}
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r.Bind(fs, Flags{In: true, Cost: "cost model"})
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestOrderCost: a family whose order depends on the cost model
// (interleaved-zb) gets -cost as each stage's cost, resolved (I = B − W
// where not given), with comm; the others get none.
func TestOrderCost(t *testing.T) {
	r := simRequest(t, "-schedule", "interleaved-zb", "-ranks", "2", "-micro", "4", "-cost", "F=1,B=3,W=0.5,comm=0.25")
	cfg, err := r.Config()
	if err != nil {
		t.Fatal(err)
	}
	want := &ir.Costs{F: []float64{1}, I: []float64{2.5}, W: []float64{0.5}, Comm: 0.25}
	if !reflect.DeepEqual(cfg.Cost, want) {
		t.Errorf("interleaved-zb -cost: Config.Cost %+v, want %+v", cfg.Cost, want)
	}
	r = simRequest(t, "-schedule", "zbv", "-ranks", "2", "-micro", "4", "-cost", "F=2")
	if cfg, err := r.Config(); err != nil || cfg.Cost != nil {
		t.Errorf("zbv -cost: Config.Cost %+v, %v; want none", cfg.Cost, err)
	}
	r = simRequest(t, "-schedule", "interleaved-zb", "-ranks", "2", "-micro", "4", "-cost", "F=-1")
	if _, err := r.Config(); err == nil || !strings.Contains(err.Error(), "F") {
		t.Errorf("interleaved-zb -cost F=-1: %v; want an error naming F", err)
	}
}

// TestGenCostOnlyWhereItShapesTheOrder: ppgen gen takes -cost for auto and
// for interleaved-zb, whose order it shapes, and refuses it elsewhere.
func TestGenCostOnlyWhereItShapesTheOrder(t *testing.T) {
	for _, tc := range []struct {
		schedule string
		ok       bool
	}{{"interleaved-zb", true}, {"auto", true}, {"1f1b", false}} {
		r, err := Parse([]string{"-schedule", tc.schedule, "-ranks", "2", "-micro", "4", "-cost", "F=1,I=0.5,W=1.5"}, Env{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.LowerOptions()
		if (err == nil) != tc.ok {
			t.Errorf("gen -schedule %s -cost: %v, want ok %v", tc.schedule, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "interleaved-zb") {
			t.Errorf("gen -schedule %s -cost: %v; want the message to name the families -cost shapes", tc.schedule, err)
		}
	}
}

// TestCompareBuildsForTheShare: in -compare interleaved-zb is built for the
// cost each of its V stages gets, 1/V of the share: its simulated makespan
// at F=1,I=0.5,W=1.5 on P=8, M=16 is PyTorch's order's 51.5 (half of its
// 103 at per-stage costs: (P-1)·F + V·M·(F+I+W), see
// TestInterleavedZBAgainstPyTorch in gen/schedules).
func TestCompareBuildsForTheShare(t *testing.T) {
	r := simRequest(t, "-ranks", "8", "-micro", "16", "-cost", "F=1,I=0.5,W=1.5")
	entries, err := auto.ParseCompare("interleaved-zb")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := r.Compare(entries, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := rows[0].Makespan; got != 51.5 {
		t.Errorf("interleaved-zb in -compare: makespan %v, want 51.5", got)
	}
}
