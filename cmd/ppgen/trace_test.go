package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/gencmd"
	"github.com/ppgen/ppgen/gen/ir"
)

// TestTraceGolden pins the bytes of `ppgen trace` for a small lowered
// schedule with a comm latency, to a file and to stdout alike.
func TestTraceGolden(t *testing.T) {
	args := []string{"trace", "-schedule", "zb-h1", "-ranks", "2", "-micro", "3", "-cost", "F=1,B=2,W=1,comm=0.25"}
	dir := t.TempDir()
	path := filepath.Join(dir, "zbh1.json")
	code, out, errs := cliRun(t, append(args, "-o", path)...)
	if code != 0 || out != "" || !strings.Contains(errs, "wrote "+path) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cliGolden(t, "testdata/trace_zbh1_p2_m3.json", got)
	if stdout := cliMust(t, args...); stdout != string(got) {
		t.Error("trace to stdout differs from trace to a file")
	}
}

// traceFile is the part of the trace-event format the tests read.
type traceFile struct {
	DisplayTimeUnit string         `json:"displayTimeUnit"`
	OtherData       map[string]any `json:"otherData"`
	TraceEvents     []struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat"`
		Ph   string         `json:"ph"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Ts   *float64       `json:"ts"`
		Dur  *float64       `json:"dur"`
		ID   *int           `json:"id"`
		BP   string         `json:"bp"`
		Args map[string]any `json:"args"`
	} `json:"traceEvents"`
}

// TestTraceEvents parses traces of several schedules and counts: one
// process and three named threads per rank, one complete event per step
// (per compute step on the compute thread), one flow per send/receive
// pair from the sender's comm thread to the receiver's, and nothing else.
func TestTraceEvents(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"1f1b", []string{"-schedule", "1f1b", "-ranks", "4", "-micro", "8"}},
		{"zbv", []string{"-schedule", "zbv", "-ranks", "4", "-micro", "8", "-cost", "F=1,B=2,W=1,comm=0.1"}},
		{"interleaved", []string{"-schedule", "interleaved", "-ranks", "3", "-virtual", "3", "-micro", "5"}},
		{"dualpipev", []string{"-schedule", "dualpipev", "-ranks", "4", "-micro", "8", "-cost", "comm=0.5"}},
		{"torch comms csv", []string{"-in", "testdata/torch_interleaved1f1b_p4_v2_m8_comms.csv"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := cliMust(t, append([]string{"trace"}, tc.args...)...)
			var tr traceFile
			if err := json.Unmarshal([]byte(out), &tr); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			// The program the trace shows, lowered the same way.
			var res gen.Result
			var err error
			if tc.args[0] == "-in" {
				p, rerr := gencmd.ReadProgram(tc.args[1])
				if rerr != nil {
					t.Fatal(rerr)
				}
				res, err = gen.LowerProgram(p, gen.Options{})
			} else {
				req := gencmd.Request{Schedule: tc.args[1]}
				for i := 2; i+1 < len(tc.args); i += 2 {
					switch tc.args[i] {
					case "-ranks":
						req.Ranks = atoi(t, tc.args[i+1])
					case "-micro":
						req.Micro = atoi(t, tc.args[i+1])
					case "-virtual":
						req.Virtual = atoi(t, tc.args[i+1])
					}
				}
				cfg, cerr := req.Config()
				if cerr != nil {
					t.Fatal(cerr)
				}
				res, err = gen.Lower(cfg, gen.Options{})
			}
			if err != nil {
				t.Fatal(err)
			}
			p := res.Program
			P := p.Placement.Ranks()
			computeSteps, sends := 0, 0
			names := []string{"compute", "comm", "swap"}
			for _, steps := range p.Ranks {
				for _, st := range steps {
					if st.Kind.IsCompute() {
						computeSteps++
					}
					if st.Kind == ir.Unshard && len(names) == 3 {
						names = append(names, "fsdp") // the FSDP stream's thread
					}
					if st.Kind.IsSend() {
						sends++
					}
				}
			}
			var procs, threads, complete, compute int
			starts := map[int][2]int{} // flow id -> pid, ts index
			finishes := map[int]int{}
			threadNames := map[string]int{}
			for _, e := range tr.TraceEvents {
				switch e.Ph {
				case "M":
					switch e.Name {
					case "process_name":
						procs++
					case "thread_name":
						threads++
						threadNames[e.Args["name"].(string)]++
					}
				case "X":
					complete++
					if e.Ts == nil || e.Dur == nil || *e.Dur < 0 || *e.Ts < 0 {
						t.Fatalf("complete event %s without a valid ts/dur", e.Name)
					}
					if k, ok := ir.ParseKind(e.Args["kind"].(string)); ok && k.IsCompute() {
						compute++
						if e.Tid != 0 {
							t.Errorf("compute step %s on thread %d", e.Name, e.Tid)
						}
					}
				case "s":
					if _, dup := starts[*e.ID]; dup || e.Tid != 1 {
						t.Errorf("flow start %d: duplicate or not on the comm thread", *e.ID)
					}
					starts[*e.ID] = [2]int{e.Pid, 0}
				case "f":
					finishes[*e.ID]++
					if e.BP != "e" || e.Tid != 1 {
						t.Errorf("flow finish %d: bp %q tid %d", *e.ID, e.BP, e.Tid)
					}
					if s, ok := starts[*e.ID]; !ok || s[0] == e.Pid {
						t.Errorf("flow %d finishes on rank %d, not on another rank after its start", *e.ID, e.Pid)
					}
				default:
					t.Errorf("unexpected event phase %q (%s)", e.Ph, e.Name)
				}
			}
			if procs != P || threads != len(names)*P {
				t.Errorf("%d processes and %d threads, want %d and %d", procs, threads, P, len(names)*P)
			}
			for _, n := range names {
				if threadNames[n] != P {
					t.Errorf("%d threads named %q, want %d", threadNames[n], n, P)
				}
			}
			if complete != p.NumSteps() {
				t.Errorf("%d complete events, want one per step (%d)", complete, p.NumSteps())
			}
			if compute != computeSteps {
				t.Errorf("%d compute events, want one per compute step (%d)", compute, computeSteps)
			}
			if len(starts) != sends || len(finishes) != sends {
				t.Errorf("%d flow starts and %d finishes, want one flow per send/receive pair (%d)", len(starts), len(finishes), sends)
			}
			for id, n := range finishes {
				if n != 1 {
					t.Errorf("flow %d has %d finishes", id, n)
				}
			}
			if again := cliMust(t, append([]string{"trace"}, tc.args...)...); again != out {
				t.Error("trace bytes are not deterministic")
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("not a number: %q", s)
		}
		n = 10*n + int(c-'0')
	}
	return n
}

// TestTraceErrors: bad input exits 2 (an unsafe program 1) with a one-line
// reason and writes no file.
func TestTraceErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "t.json")
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"-schedule", "1f1b", "-ranks", "2", "-micro", "2", "-cost", "F=-1"}, "F", 2},
		{[]string{"-schedule", "nope", "-ranks", "2", "-micro", "2"}, "nope", 2},
		{[]string{"-ranks", "2", "-micro", "2"}, "missing -schedule", 2},
		{[]string{"-in", "testdata/rendezvous_deadlock.csv"}, "deadlock", 1},
		{[]string{"-schedule", "1f1b", "-ranks", "2", "-micro", "2", "-o", filepath.Join(notDir(t, dir), "t.json")}, "not a directory", 2},
		{[]string{"-schedule", "1f1b", "-ranks", "2", "-micro", "2", "extra"}, "unexpected argument", 2},
	} {
		args := append([]string{"trace"}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "-o ") {
			args = append(args, "-o", out)
		}
		code, stdout, errs := cliRun(t, args...)
		if code != tc.code || stdout != "" || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", tc.args, code, stdout, errs, tc.code, tc.want)
		}
		cliNoFile(t, out)
	}
}
