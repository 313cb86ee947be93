package e2e_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// TestTimeline: with a Timeline, every stage call of an iteration is
// recorded once, WriteTrace names each by its step in the program (the
// k-th F of a stage is the k-th F op of it), and the runtime still finds
// the stages' optional interfaces behind the wrappers.
func TestTimeline(t *testing.T) {
	p := progByName(t, "1f1b-P3-V0-M6")
	trs := inprocWorld(len(p.ops), 10*time.Second)
	g := newRig(t, p, trs, false)
	tl := &pipe.Timeline{}
	// Rebuild the rig's executors with the timeline.
	for r := range g.xs {
		g.xs[r].Close()
		stages := map[int]pipe.Stage{}
		for s, rr := range p.spec.RankOf {
			if rr == r {
				stages[s] = g.stages[s]
			}
		}
		x, err := pipe.New(pipe.Config{Rank: r, Spec: p.spec, Stages: stages, Loss: mse{}, Data: g.data, Transport: trs[r], Timeline: tl})
		if err != nil {
			t.Fatal(err)
		}
		g.xs[r] = x
	}
	for range 2 { // the second iteration's counts start again after Reset
		tl.Reset()
		if errs, _ := runRanks(g, rankFns(p, "interp")); errs[0] != nil || errs[1] != nil || errs[2] != nil {
			t.Fatalf("run: %v", errs)
		}
	}
	S, M := p.spec.Stages, p.spec.Micro
	if got, want := len(tl.Events()), 3*S*M; got != want { // B = I + W calls
		t.Errorf("%d calls recorded, want %d", got, want)
	}
	// Every transfer of the program (none is batched) is recorded once,
	// with its tensor's bytes.
	xfers := 0
	for _, ops := range p.ops {
		for _, op := range ops {
			if op.Kind.IsSend() || op.Kind.IsRecv() {
				xfers++
			}
		}
	}
	if got := tl.Transfers(); len(got) != xfers || xfers == 0 {
		t.Errorf("%d transfers recorded, want the program's %d", len(got), xfers)
	} else if got[0].Bytes <= 0 || got[0].End.Before(got[0].Start) {
		t.Errorf("transfer %+v: no bytes or a negative time", got[0])
	}
	var b bytes.Buffer
	if err := tl.WriteTrace(&b, "1f1b", p.ops); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name string
			Ph   string
			Pid  int
			Ts   float64
			Dur  float64
			Args map[string]any
		}
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b.String())
	}
	names := map[string]bool{}
	for _, e := range doc.TraceEvents {
		if e.Ph == "X" {
			if e.Dur < 0 || e.Ts <= 0 {
				t.Errorf("%s: ts %v dur %v", e.Name, e.Ts, e.Dur)
			}
			names[e.Name] = true
		}
	}
	for s := range S {
		for m := range M {
			for _, k := range []string{"F", "I", "W"} {
				if n := strconv.Itoa(s) + k + strconv.Itoa(m); !names[n] {
					t.Errorf("no event %s", n)
				}
			}
		}
	}
}
