package sim

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

type parsedTrace struct {
	DisplayTimeUnit string         `json:"displayTimeUnit"`
	OtherData       map[string]any `json:"otherData"`
	TraceEvents     []struct {
		Name string         `json:"name"`
		Ph   string         `json:"ph"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Ts   *float64       `json:"ts"`
		Dur  *float64       `json:"dur"`
		ID   *int           `json:"id"`
		Args map[string]any `json:"args"`
	} `json:"traceEvents"`
}

func TestTrace(t *testing.T) {
	for _, tc := range []struct {
		name string
		prog ir.Program
	}{
		{"1f1b lowered", onef1bComm(4, 8)},
		{"gpipe compute-only", gpipe(3, 4)},
		{"split", onef1b(3, 5, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := uniformCost(1, 2, 1, 0.25)
			r := mustRun(t, tc.prog, c)
			b, err := Trace(r, tc.prog, TraceMeta{Schedule: "1f1b", Cost: &c})
			if err != nil {
				t.Fatal(err)
			}
			var tr parsedTrace
			if err := json.Unmarshal(b, &tr); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			computeSteps, sends := 0, 0
			for _, steps := range tc.prog.Ranks {
				for _, st := range steps {
					if st.Kind.IsCompute() {
						computeSteps++
					}
					if st.Kind.IsSend() {
						sends++
					}
				}
			}
			xCompute, xAll, starts, finishes := 0, 0, map[int]int{}, map[int]int{}
			procNames, threadNames := 0, 0
			for _, e := range tr.TraceEvents {
				switch e.Ph {
				case "X":
					xAll++
					if e.Tid == 0 && e.Args["kind"] != nil {
						if k, ok := ir.ParseKind(e.Args["kind"].(string)); ok && k.IsCompute() {
							xCompute++
						}
					}
					if e.Ts == nil || e.Dur == nil || *e.Dur < 0 {
						t.Errorf("X event %s without ts/dur", e.Name)
					}
				case "s":
					starts[*e.ID]++
				case "f":
					finishes[*e.ID]++
				case "M":
					switch e.Name {
					case "process_name":
						procNames++
					case "thread_name":
						threadNames++
					}
				}
			}
			if xCompute != computeSteps {
				t.Errorf("%d compute X events, want one per compute step (%d)", xCompute, computeSteps)
			}
			if xAll != tc.prog.NumSteps() {
				t.Errorf("%d X events, want one per step (%d)", xAll, tc.prog.NumSteps())
			}
			if len(starts) != sends || len(finishes) != sends {
				t.Errorf("%d flow starts, %d finishes; want one pair per send (%d)", len(starts), len(finishes), sends)
			}
			for id, n := range starts {
				if n != 1 || finishes[id] != 1 {
					t.Errorf("flow id %d: %d starts, %d finishes", id, n, finishes[id])
				}
			}
			if P := len(tc.prog.Ranks); procNames != P || threadNames != 3*P {
				t.Errorf("%d process names, %d thread names; want %d and %d", procNames, threadNames, P, 3*P)
			}
			if tr.OtherData["makespan"].(float64) != r.Makespan {
				t.Errorf("otherData makespan %v, want %v", tr.OtherData["makespan"], r.Makespan)
			}
			again, _ := Trace(r, tc.prog, TraceMeta{Schedule: "1f1b", Cost: &c})
			if string(again) != string(b) {
				t.Error("trace bytes are not deterministic")
			}
		})
	}
}

func TestTraceGolden(t *testing.T) {
	p, err := ir.ParseText("rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 0RECV_B0 0SEND_F1 0B0 0RECV_B1 0B1\n" +
		"rank 1: 1RECV_F0 1F0 1I0 1SEND_B0 1RECV_F1 1W0 (1F1;1I1)OVERLAP_F_B 1SEND_B1 1W1\n")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCost("F=1,B=2,W=1,comm=0.1,data=0.25,overlap=0.5", p.Stages())
	if err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, p, c)
	b, err := Trace(r, p, TraceMeta{Schedule: "hand", Command: "ppgen trace -schedule hand", Cost: &c})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "trace.json", b)
}

// TestFSDPLane: UNSHARD runs on the FSDP lane, which the trace shows as
// thread "fsdp" (tid 3) when the program has one, and the SVG as a strip
// under the compute row; a program without UNSHARD gets no such thread.
func TestFSDPLane(t *testing.T) {
	p, err := ir.ParseText("rank 0: 0UNSHARD 0DATA_LOAD0 1UNSHARD 0F0 1F0 1B0 1REDUCE_GRAD 1RESHARD 0B0 0REDUCE_GRAD 0RESHARD OPT_STEP\n")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCost("unshard=0.5,data=0.25", p.Stages())
	if err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, p, c)
	for _, ev := range r.Events {
		want := LaneCompute
		if ev.Step.Kind == ir.Unshard {
			want = LaneFSDP
		}
		if ev.Lane != want {
			t.Errorf("%s on lane %s, want %s", ev.Step, ev.Lane, want)
		}
	}
	// 1UNSHARD is posted after the data load (0.25) and queues behind 0UNSHARD.
	if ev := r.Events[2]; ev.Posted != 0.25 || ev.Start != 0.5 || ev.End != 1 {
		t.Errorf("1UNSHARD posted %g, runs [%g, %g]; want posted 0.25, [0.5, 1]", ev.Posted, ev.Start, ev.End)
	}
	if LaneFSDP.String() != "fsdp" {
		t.Errorf("LaneFSDP.String() = %q", LaneFSDP.String())
	}
	b, err := Trace(r, p, TraceMeta{})
	if err != nil {
		t.Fatal(err)
	}
	var tr parsedTrace
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	thread, onLane := false, 0
	for _, e := range tr.TraceEvents {
		if e.Name == "thread_name" && e.Tid == tidFSDP && e.Args["name"] == "fsdp" {
			thread = true
		}
		if e.Ph == "X" && e.Tid == tidFSDP {
			onLane++
			if e.Args["kind"] != "UNSHARD" {
				t.Errorf("%s on the fsdp thread", e.Name)
			}
		}
	}
	if !thread || onLane != 2 {
		t.Errorf("fsdp thread named: %v, %d events on it; want true, 2", thread, onLane)
	}
	svg := string(SVG(r, p, SVGMeta{}))
	if !strings.Contains(svg, `height="6" fill="#edc948" stroke="#ffffff" stroke-width="0.5"><title>rank 0 0UNSHARD [0, 0.5]`) {
		t.Errorf("SVG lacks the strip of 0UNSHARD:\n%s", svg)
	}
	plain := mustRun(t, gpipe(2, 2), DefaultCost())
	if b, _ := Trace(plain, gpipe(2, 2), TraceMeta{}); strings.Contains(string(b), `"fsdp"`) {
		t.Error("a program without UNSHARD has an fsdp thread")
	}
}
