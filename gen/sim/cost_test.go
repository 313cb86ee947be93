package sim

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

func TestParseCost(t *testing.T) {
	f := func(v ...float64) []float64 { return v }
	tests := []struct {
		spec       string
		stages     int
		f, b, i, w []float64
		comm       float64
	}{
		{"", 4, f(1), f(2), f(1), f(1), 0},
		{"F=1,B=2,W=1,comm=0", 4, f(1), f(2), f(1), f(1), 0},
		{"B=3", 2, f(1), f(3), f(2), f(1), 0},
		{"F=1,B=2", 2, f(1), f(2), f(1), f(1), 0},
		{"B=1", 2, f(1), f(1), f(0), f(1), 0},
		{"B=3,W=1", 2, f(1), f(3), f(2), f(1), 0},
		{"B=3,I=2", 2, f(1), f(3), f(2), f(1), 0},
		{"B=3,I=1", 2, f(1), f(3), f(1), f(2), 0},
		{"I=1.5,W=0.5", 2, f(1), f(2), f(1.5), f(0.5), 0},
		{"I=3", 1, f(1), f(4), f(3), f(1), 0},
		{"I=5", 1, f(1), f(6), f(5), f(1), 0},
		{"I=0.5,W=1.5", 1, f(1), f(2), f(0.5), f(1.5), 0},
		{"I=1,W=2", 1, f(1), f(3), f(1), f(2), 0},
		{"I=1:2,W=0.5", 2, f(1, 1), f(1.5, 2.5), f(1, 2), f(0.5, 0.5), 0},
		{"B=3:4,I=1:2", 2, f(1, 1), f(3, 4), f(1, 2), f(2, 2), 0},
		{"B=0.3,I=0.1,W=0.2", 1, f(1), f(0.3), f(0.1), f(0.2), 0},
		{"W=0.5", 1, f(1), f(2), f(1.5), f(0.5), 0},
		{"B=5,I=3,W=2", 1, f(1), f(5), f(3), f(2), 0},
		{" f = 2 , b=4 , COMM=0.25 ", 3, f(2), f(4), f(3), f(1), 0.25},
		{"F=1e9,B=1e9,W=1e9", 1, f(1e9), f(1e9), f(0), f(1e9), 0},
		{"F=1:1:1:1.4,B=2", 4, f(1, 1, 1, 1.4), f(2, 2, 2, 2), f(1, 1, 1, 1), f(1, 1, 1, 1), 0},
		{"F=1:2,B=2:4,W=1", 2, f(1, 2), f(2, 4), f(1, 3), f(1, 1), 0},
		{"F=1:2:3", 0, f(1, 2, 3), f(2, 2, 2), f(1, 1, 1), f(1, 1, 1), 0},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			c, err := ParseCost(tt.spec, tt.stages)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.F, tt.f) || !reflect.DeepEqual(c.B, tt.b) || !reflect.DeepEqual(c.I, tt.i) || !reflect.DeepEqual(c.W, tt.w) || c.Comm != tt.comm {
				t.Errorf("got F=%v B=%v I=%v W=%v comm=%v; want F=%v B=%v I=%v W=%v comm=%v", c.F, c.B, c.I, c.W, c.Comm, tt.f, tt.b, tt.i, tt.w, tt.comm)
			}
			// String round-trips.
			d, err := ParseCost(c.String(), tt.stages)
			if err != nil {
				t.Fatalf("ParseCost(%q): %v", c.String(), err)
			}
			if !reflect.DeepEqual(c, d) {
				t.Errorf("round trip through %q: %+v != %+v", c.String(), d, c)
			}
		})
	}
}

func TestParseCostScalars(t *testing.T) {
	c, err := ParseCost("data=0.5,overlap=0.25,unshard=1,reduce=2,opt=3,swap=4,comm=0.1", 2)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultCost()
	want.DataLoad, want.Overlap, want.Unshard, want.Reduce, want.Opt, want.Swap, want.Comm = 0.5, 0.25, 1, 2, 3, 4, 0.1
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v, want %+v", c, want)
	}
	if got := c.String(); got != "F=1,B=2,I=1,W=1,comm=0.1,data=0.5,overlap=0.25,unshard=1,reduce=2,opt=3,swap=4" {
		t.Errorf("String() = %q", got)
	}
}

func TestParseCostErrors(t *testing.T) {
	tests := []struct{ spec, want string }{
		{"X=1", `unknown key "X"; valid keys are F, B, I, W, comm, data, overlap, unshard, reduce, opt, swap, act, bw, param, dp`},
		{"param=1,bw=1", "param gives parameter sizes but bw is 1 and dp 0"},
		{"param=1,dp=2", "param gives parameter sizes but bw is 0 and dp 2"},
		{"param=1:2,bw=1,dp=2", "param has 2 values; want 1 (every stage) or 4"},
		{"dp=2.5", "dp is 2.5; want a whole number of data-parallel ranks in [0, 65536]"},
		{"dp=1e6", "dp is 1e+06; want a whole number"},
		{"dp=2:2", "dp takes one value, not a per-stage list"},
		{"act=1", "act gives activation sizes but bw is 0"},
		{"act=1:2,bw=1", "act has 2 values; want 1 (every stage) or 4 (one per stage, colon-separated)"},
		{"act=-1,bw=1", "act=-1: costs cannot be negative"},
		{"bw=1:2", "bw takes one value, not a per-stage list"},
		{"F", `"F" is not key=value`},
		{"F=1,F=2", "key F given twice"},
		{"F=a", `F=a: "a" is not a number`},
		{"F=1:2:3", "F has 3 values; want 1 (every stage) or 4 (one per stage, colon-separated)"},
		{"B=-1", "B=-1: costs cannot be negative"},
		{"comm=1:2", "comm takes one value, not a per-stage list"},
		{"comm=NaN", `comm=NaN: "NaN" is not a number`},
		{"F=Inf", "F is +Inf; want a finite value in [0, 1e+09]"},
		{"F=1e308,B=1e308", "F=1e308: F is 1e+308; want a finite value in [0, 1e+09]"},
		{"B=1e400", "B=1e400: B is +Inf; want a finite value in [0, 1e+09]"},
		{"comm=1e10", "comm is 1e+10; want a finite value in [0, 1e+09]"},
		{"bw=1e-12,act=1", "bw is 1e-12; want 0 (infinite bandwidth) or a value in [1e-09, 1e+09]"},
		{"overlap=2", "overlap=2: overlap is 2; want a fraction in [0, 1]"},
		{"B=1,W=2", "stage 0: I = B − W = 1 − 2 < 0: W=2 exceeds B=1"},
		{"B=0.5", "stage 0: I = B − W = 0.5 − 1 < 0: W (default 1) exceeds B=0.5; give W ≤ B, or give I"},
		{"W=3", "I = B − W = 2 − 3 < 0"},
		{"B=1,I=2", "stage 0: W = B − I = 1 − 2 < 0: I=2 exceeds B=1; give I ≤ B, or give W"},
		{"B=4,I=3,W=2", "stage 0: B=4 but I + W = 3 + 2 = 5 (B is the full backward, I then W); give B=5, or leave one of B, I, W out"},
		{"B=2,I=5,W=1", "stage 0: B=2 but I + W = 5 + 1 = 6"},
		{"B=2:2:2:2,I=1:1:1:2,W=1", "stage 3: B=2 but I + W = 2 + 1 = 3"},
		{"B=1,I=1:1:1:2", "stage 3: W = B − I = 1 − 2 < 0"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			_, err := ParseCost(tt.spec, 4)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.spec) {
				t.Errorf("error %q does not quote the spec", err)
			}
		})
	}
}

func TestResolveZeroIsDefault(t *testing.T) {
	c, err := Cost{}.Resolve(3)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, DefaultCost()) {
		t.Errorf("zero cost resolves to %+v, want %+v", c, DefaultCost())
	}
	if _, err := (Cost{F: []float64{1, 2}, B: []float64{1, 2, 3}}).Resolve(0); err == nil || !strings.Contains(err.Error(), "per-stage lists must agree") {
		t.Errorf("mismatched lists: err = %v", err)
	}
	if _, err := (Cost{F: []float64{}}).Resolve(0); err == nil {
		t.Errorf("empty list accepted")
	}
}

// TestCostBandwidth: act and bw make a transfer take comm + size/bw, with
// the size of the activation it carries (SEND_B of stage s: the gradient
// with respect to stage s-1's output); String writes them only with a
// bandwidth, and round-trips.
func TestCostBandwidth(t *testing.T) {
	c, err := ParseCost("comm=0.5,act=2:4:6,bw=2", 3)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.String(), "F=1,B=2,I=1,W=1,comm=0.5,data=0,overlap=0,unshard=0,reduce=0,opt=0,swap=0,act=2:4:6,bw=2"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if d, err := ParseCost(c.String(), 3); err != nil || !reflect.DeepEqual(c, d) {
		t.Errorf("round trip: %+v, %v", d, err)
	}
	for _, tc := range []struct {
		st   ir.Step
		want float64
	}{
		{ir.Comm(ir.SendF, 1, 0, 2), 0.5 + 4.0/2},
		{ir.Comm(ir.RecvF, 2, 0, 1), 0.5 + 4.0/2},
		{ir.Comm(ir.SendB, 2, 0, 1), 0.5 + 4.0/2},
		{ir.Comm(ir.RecvB, 0, 0, 1), 0.5 + 2.0/2},
		{ir.Comm(ir.DataSend, 0, 0, 1), 0.5},
		{ir.Comm(ir.MpipeRecv, 0, 1, 1), 0.5},
	} {
		if got := c.transfer(tc.st); got != tc.want {
			t.Errorf("transfer(%s) = %g, want %g", tc.st, got, tc.want)
		}
	}
	if got := DefaultCost().String(); strings.Contains(got, "bw") || strings.Contains(got, "act") {
		t.Errorf("default String() = %q: act and bw only with a bandwidth", got)
	}
}

// TestRunBandwidth: 1F1B at P=2, M=1 (F=1, B=2) takes 6 with free
// transfers; with act=1,bw=1 each of its two transfers takes 1 (8), and
// comm=0.5 adds half a unit to each (9).
func TestRunBandwidth(t *testing.T) {
	p := onef1bComm(2, 1)
	for _, tc := range []struct {
		spec string
		want float64
	}{{"", 6}, {"act=1,bw=1", 8}, {"act=1:3,bw=1", 8}, {"act=1,bw=1,comm=0.5", 9}, {"act=2,bw=4", 7}} {
		c, err := ParseCost(tc.spec, 2)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Run(p, c)
		if err != nil {
			t.Fatal(err)
		}
		if r.Makespan != tc.want {
			t.Errorf("%q: makespan %g, want %g", tc.spec, r.Makespan, tc.want)
		}
		// The compute-only order charges the same latency per cross-rank dependency.
		rc, err := Run(p.ComputeOnly(), c)
		if err != nil {
			t.Fatal(err)
		}
		if rc.Makespan != tc.want {
			t.Errorf("%q compute-only: makespan %g, want %g", tc.spec, rc.Makespan, tc.want)
		}
	}
}

// TestCostCollectives: with param, bw and dp > 1, UNSHARD and REDUCE_GRAD
// take the ring cost of an all-gather and a reduce-scatter on top of
// unshard and reduce: (dp−1)·comm + (dp−1)/dp · param/bw.
func TestCostCollectives(t *testing.T) {
	c, err := ParseCost("comm=0.5,param=8:16,bw=2,dp=4,unshard=1,reduce=0.25", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.String(), "F=1,B=2,I=1,W=1,comm=0.5,data=0,overlap=0,unshard=1,reduce=0.25,opt=0,swap=0,bw=2,param=8:16,dp=4"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if d, err := ParseCost(c.String(), 2); err != nil || !reflect.DeepEqual(c, d) {
		t.Errorf("round trip: %+v, %v", d, err)
	}
	for _, tc := range []struct {
		st   ir.Step
		want float64
	}{
		{ir.Step{Kind: ir.Unshard, Stage: 0, Micro: -1}, 1 + 3*0.5 + 0.75*8/2},
		{ir.Step{Kind: ir.Unshard, Stage: 1, Micro: -1}, 1 + 3*0.5 + 0.75*16/2},
		{ir.Step{Kind: ir.ReduceGrad, Stage: 1, Micro: -1}, 0.25 + 3*0.5 + 0.75*16/2},
		{ir.Step{Kind: ir.Reshard, Stage: 1, Micro: -1}, 0},
	} {
		if got := c.StepCost(tc.st); got != tc.want {
			t.Errorf("StepCost(%v) = %g, want %g", tc.st.Kind, got, tc.want)
		}
	}
	for _, spec := range []string{"dp=1,comm=1", "dp=8"} {
		c, err := ParseCost(spec, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.StepCost(ir.Step{Kind: ir.Unshard, Stage: 0, Micro: -1}); got != 0 {
			t.Errorf("%s: UNSHARD costs %g without parameter sizes or a group", spec, got)
		}
	}
}
