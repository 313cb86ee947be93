package sim

import (
	"encoding/json"
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
