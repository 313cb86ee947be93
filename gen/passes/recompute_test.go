package passes

import (
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

func TestParseRecompute(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want RecomputePolicy
		err  string
	}{
		{"", RecomputePolicy{}, ""},
		{"none", RecomputePolicy{}, ""},
		{"full", RecomputePolicy{All: true}, ""},
		{"full:2,0,2", RecomputePolicy{Stages: []int{0, 2}}, ""},
		{"full@idle", RecomputePolicy{All: true, Idle: true}, ""},
		{"full:1@idle", RecomputePolicy{Stages: []int{1}, Idle: true}, ""},
		{"none@idle", RecomputePolicy{}, "unknown recompute policy"},
		{"@idle", RecomputePolicy{}, "unknown recompute policy"},
		{"full:x", RecomputePolicy{}, "not a stage number"},
		{"full:-1", RecomputePolicy{}, "not a stage number"},
		{"selective", RecomputePolicy{}, "names no share"},
		{"selective:0.5", RecomputePolicy{All: true, Share: 0.5}, ""},
		{"selective:1", RecomputePolicy{All: true, Share: 1}, ""},
		{"selective:0.25@idle", RecomputePolicy{All: true, Share: 0.25, Idle: true}, ""},
		{"selective:2=0.25,0=0.5", RecomputePolicy{Stages: []int{0, 2}, Shares: []float64{0.5, 0.25}}, ""},
		{"selective:0", RecomputePolicy{}, `share "0" in "selective:0" is not a number in (0, 1]`},
		{"selective:1.5", RecomputePolicy{}, "not a number in (0, 1]"},
		{"selective:half", RecomputePolicy{}, "not a number in (0, 1]"},
		{"selective:0=0.5,1", RecomputePolicy{}, `"1" in "selective:0=0.5,1" is not S=F`},
		{"selective:x=0.5", RecomputePolicy{}, "not a stage number"},
		{"selective:0=0.5,0=0.25", RecomputePolicy{}, "stage 0 is given twice"},
		{"some", RecomputePolicy{}, "unknown recompute policy"},
		{"model", RecomputePolicy{Model: true}, ""},
		{"model@idle", RecomputePolicy{Model: true, Idle: true}, ""},
		{"model:0", RecomputePolicy{}, "unknown recompute policy"},
		{"selective:2=model,0=0.5", RecomputePolicy{Stages: []int{0, 2}, Shares: []float64{0.5, 0}, FromModel: []bool{false, true}}, ""},
		{"selective:1=model@idle", RecomputePolicy{Stages: []int{1}, Shares: []float64{0}, FromModel: []bool{true}, Idle: true}, ""},
		{"selective:model", RecomputePolicy{}, "not a number in (0, 1]"},
	} {
		got, err := ParseRecompute(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v; want one saying %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err == "" && (got.All != tc.want.All || got.Idle != tc.want.Idle || !slices.Equal(got.Stages, tc.want.Stages) ||
			got.Share != tc.want.Share || !slices.Equal(got.Shares, tc.want.Shares) || got.Model != tc.want.Model || !slices.Equal(got.FromModel, tc.want.FromModel)):
			t.Errorf("%q: got %+v; want %+v", tc.in, got, tc.want)
		}
	}
}

// TestRecomputePlacement: -recompute full places one RECOMPUTE per chunk,
// right before the step of its first backward, with the chunk's slot; a
// list of stages only those; a forward-only program gets none; a program
// with swap steps and a stage outside the program are refused; and the
// option is declared for gencmd.
func TestRecomputePlacement(t *testing.T) {
	p := mustParse("rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1F1 1B0 1B1\n")
	for _, tc := range []struct {
		policy string
		count  int
	}{{"full", 4}, {"full:1", 2}, {"none", 0}} {
		q, _, err := Lower(p, Options{NoData: true, Set: map[string]string{"recompute": tc.policy}})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, steps := range q.Ranks {
			for i, st := range steps {
				if st.Kind != abi.Recompute {
					continue
				}
				n++
				next := steps[i+1]
				if next.Kind != ir.Backward || next.Stage != st.Stage || next.Micro != st.Micro || next.Slot != st.Slot || st.Slot < 0 {
					t.Errorf("-recompute %s: %s is followed by %s; want its chunk's backward, in its slot", tc.policy, st, next)
				}
			}
		}
		if n != tc.count {
			t.Errorf("-recompute %s: %d RECOMPUTE steps; want %d", tc.policy, n, tc.count)
		}
	}
	// A selective policy places the same steps and records each stage's
	// share in the program (1: full, not recorded).
	for _, tc := range []struct {
		policy string
		share  []float64
		count  int
	}{{"selective:0.5", []float64{0.5, 0.5}, 4}, {"selective:1=0.25", []float64{0, 0.25}, 2}, {"selective:1", nil, 4}} {
		pol, err := ParseRecompute(tc.policy)
		if err != nil {
			t.Fatal(err)
		}
		q, err := Recompute(p, pol)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, steps := range q.Ranks {
			for _, st := range steps {
				if st.Kind == abi.Recompute {
					n++
				}
			}
		}
		if n != tc.count || !slices.Equal(q.RecomputeShare, tc.share) {
			t.Errorf("-recompute %s: %d RECOMPUTE steps, shares %v; want %d, %v", tc.policy, n, q.RecomputeShare, tc.count, tc.share)
		}
		for s := range 2 {
			if want := pol.Part(s); q.RecomputePart(s) != want && want != 0 {
				t.Errorf("-recompute %s: stage %d recomputes %v of the program; the policy says %v", tc.policy, s, q.RecomputePart(s), want)
			}
		}
	}
	fwd := mustParse("rank 0: 0F0 0F1\nrank 1: 1F0 1F1\n")
	if q, err := Recompute(fwd, RecomputePolicy{All: true}); err != nil || ir.FormatText(q) != ir.FormatText(fwd) {
		t.Errorf("forward-only: %v, %s", err, ir.FormatText(q))
	}
	if _, err := Recompute(p, RecomputePolicy{Stages: []int{2}}); err == nil || !strings.Contains(err.Error(), "stage 2 is outside") {
		t.Errorf("stage 2 of 2: %v", err)
	}
	if _, err := Recompute(mustParse("rank 0: 0F0 0SWAP_LAUNCH_OFFLOAD0 0B0\n"), RecomputePolicy{All: true}); err == nil || !strings.Contains(err.Error(), "leave stage 0 out of -recompute") {
		t.Errorf("with -swap of a recomputed stage: %v", err)
	}
	// A swapped chunk of a stage the policy leaves alone is no conflict.
	if q, err := Recompute(mustParse("rank 0: 0F0 0SWAP_LAUNCH_OFFLOAD0 0B0\nrank 1: 1F0 1B0\n"), RecomputePolicy{Stages: []int{1}}); err != nil || !strings.Contains(ir.FormatText(q), "1RECOMPUTE0 1B0") {
		t.Errorf("with -swap of another stage: %v\n%s", err, ir.FormatText(q))
	}
	if _, _, err := Lower(p, Options{Set: map[string]string{"recompute": "sometimes"}}); err == nil || !strings.Contains(err.Error(), "-recompute sometimes") {
		t.Errorf("a bad value: %v", err)
	}
	if _, _, err := Lower(p, Options{Set: map[string]string{"nosuch": "x"}}); err == nil || !strings.Contains(err.Error(), "unknown lowering option") {
		t.Errorf("an unknown option: %v", err)
	}
	if o := declaredOption("recompute"); o == nil || o.Before != "slots" {
		t.Errorf("recompute is not declared before slots: %+v", o)
	}
}

// TestRecomputeIntoIdle: @idle moves RECOMPUTE steps earlier only where
// the simulated iteration gets shorter and the largest simulated peak of
// live chunks stays; on 1f1b with stage 0 recomputing (P=4, M=8, unit
// costs) it gets 37 -> 35, the largest peak 3, and every RECOMPUTE still
// comes after its F.
func TestRecomputeIntoIdle(t *testing.T) {
	base := oneF1B(4, 8)
	run := func(policy string) (ir.Program, sim.Result) {
		t.Helper()
		q, _, err := Lower(base, Options{Set: map[string]string{"recompute": policy}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := sim.Run(q, sim.DefaultCost())
		if err != nil {
			t.Fatal(err)
		}
		return q, res
	}
	_, late := run("full:0")
	q, idle := run("full:0@idle")
	if late.Makespan != 37 || idle.Makespan != 35 {
		t.Errorf("makespan %v late, %v idle; want 37, 35", late.Makespan, idle.Makespan)
	}
	if slices.Max(idle.PeakActivations) != 3 {
		t.Errorf("peaks %v idle; want 3 at most, as rank 1 without recompute", idle.PeakActivations)
	}
	if slices.Max(idle.PeakActivations) > slices.Max(late.PeakActivations) {
		t.Errorf("peaks %v idle, %v late: the largest rose", idle.PeakActivations, late.PeakActivations)
	}
	moved := 0
	for i, st := range q.Ranks[0] {
		if st.Kind != abi.Recompute {
			continue
		}
		f := slices.IndexFunc(q.Ranks[0], func(x ir.Step) bool { return producesForward(x, st.Stage, st.Micro) })
		if f < 0 || f > i {
			t.Errorf("%s at %d before its F (%d)", st, i, f)
		}
		if next := q.Ranks[0][i+1]; next.Kind != ir.Backward || next.Micro != st.Micro {
			moved++
		}
	}
	if moved == 0 {
		t.Errorf("no RECOMPUTE moved")
	}
	// Nothing to gain: the program comes back as it was.
	p, _, err := Lower(base, Options{Set: map[string]string{"recompute": "full"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := RecomputeIntoIdle(p, sim.DefaultCost(), 0); ir.FormatText(got) != ir.FormatText(p) {
		t.Errorf("1f1b full: RecomputeIntoIdle moved steps without a gain")
	}
}

// FuzzParseRecompute: -recompute's parser never panics on a user's value,
// and what it accepts is a well-formed policy: stages sorted, distinct and
// in range, one share per listed stage, every share in (0, 1], and Part of
// any stage in [0, 1] (1 for a stage the policy recomputes whole).
func FuzzParseRecompute(f *testing.F) {
	for _, s := range []string{"", "none", "full", "full:0,2", "full:2,0,2", "selective:0.5", "selective:0=0.5,2=0.25",
		"selective:0=1", "model", "model@idle", "full@idle", "selective:0.25@idle", "none@idle", "@idle", "full@idle@idle",
		"full:", "full:-1", "full:99999999999", "selective:", "selective:0", "selective:1.5", "selective:NaN",
		"selective:0=0.5,0=0.5", "selective:0=", "selective:=0.5", "selective:0=0.5,x", "partial",
		"selective:0=model,2=0.5", "selective:1=model@idle", "selective:model", "selective:0=model,0=model"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		pol, err := ParseRecompute(v)
		if err != nil {
			return
		}
		if !slices.IsSorted(pol.Stages) || len(slices.Compact(slices.Clone(pol.Stages))) != len(pol.Stages) {
			t.Fatalf("ParseRecompute(%q): stages %v not sorted and distinct", v, pol.Stages)
		}
		if len(pol.Shares) != 0 && len(pol.Shares) != len(pol.Stages) {
			t.Fatalf("ParseRecompute(%q): %d shares for %d stages", v, len(pol.Shares), len(pol.Stages))
		}
		if len(pol.FromModel) != 0 && len(pol.FromModel) != len(pol.Stages) {
			t.Fatalf("ParseRecompute(%q): %d model marks for %d stages", v, len(pol.FromModel), len(pol.Stages))
		}
		for _, s := range pol.Stages {
			if s < 0 || s > ir.MaxIndex {
				t.Fatalf("ParseRecompute(%q): stage %d out of range", v, s)
			}
		}
		for _, x := range append(slices.Clone(pol.Shares), pol.Share) {
			if x != 0 && !(x > 0 && x <= 1) {
				t.Fatalf("ParseRecompute(%q): share %v outside (0, 1]", v, x)
			}
		}
		for _, s := range append(slices.Clone(pol.Stages), 0, 1, ir.MaxIndex) {
			if p := pol.Part(s); !(p >= 0 && p <= 1) || (pol.On(s) && p == 0) {
				t.Fatalf("ParseRecompute(%q): Part(%d) = %v (On %v)", v, s, p, pol.On(s))
			}
		}
	})
}
