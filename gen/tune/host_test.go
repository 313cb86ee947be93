package tune

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// withSpans adds host events to a trace made by trace: each is {rank,
// kind, ts µs, dur µs}.
func withSpans(tr string, spans ...[4]any) string {
	if len(spans) == 0 {
		return tr
	}
	var evs []string
	for _, s := range spans {
		evs = append(evs, fmt.Sprintf(`{"name":%q,"cat":"host","ph":"X","pid":%d,"tid":2,"ts":%v,"dur":%v,"args":{"kind":%q}}`,
			s[1], s[0], s[2], s[3], s[1]))
	}
	return strings.Replace(tr, `{"traceEvents":[`, `{"traceEvents":[`+strings.Join(evs, ",")+",", 1)
}

// TestFitHost: opt is the largest of the ranks' median OPT_STEP spans;
// each reduction (the n-th ALL_REDUCE or loss span of every rank) takes
// its shortest span, allreduce is the median of them less comm; the
// program's span and spans of other kinds do not count. Worked by hand.
func TestFitHost(t *testing.T) {
	base := trace([][3][]float64{{{1}, {1}, {1}}, {{1}, {1}, {1}}})
	cases := []struct {
		name                 string
		spans                [][4]any
		opt, allreduce       float64
		optSteps, reductions int
	}{
		{"none", nil, 0, 0, 0, 0},
		{"opt", [][4]any{
			{0, "OPT_STEP", 10, 1000}, {0, "OPT_STEP", 20, 3000}, {0, "OPT_STEP", 30, 2000}, // rank 0: median 2 ms
			{1, "OPT_STEP", 10, 500}, {1, "OPT_STEP", 20, 700}, // rank 1: 0.6 ms
			{1, "program", 0, 90000},
		}, 2, 0, 5, 0},
		{"reductions", [][4]any{
			// Step 1: rank 0 waited 5 ms for rank 1, whose span is the
			// reduction's time (0.2 ms); the loss 0.1 ms.
			{0, "ALL_REDUCE", 100, 5200}, {1, "ALL_REDUCE", 5100, 200}, {0, "loss", 6000, 100}, {1, "loss", 6000, 400},
			// Step 2: 0.3 ms and 0.5 ms.
			{1, "ALL_REDUCE", 9000, 3300}, {0, "ALL_REDUCE", 12000, 300}, {0, "loss", 13000, 500}, {1, "loss", 13000, 500},
			{0, "something else", 0, 1e6},
		}, 0, 0.25, 0, 4}, // median of 0.2, 0.1, 0.3, 0.5
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Read(strings.NewReader(withSpans(base, tc.spans...)), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !near(f.Opt, tc.opt) || !near(f.AllReduce, tc.allreduce) || f.OptSteps != tc.optSteps || f.Reductions != tc.reductions {
				t.Errorf("opt %g (%d spans), allreduce %g (%d reductions); want %g (%d), %g (%d)",
					f.Opt, f.OptSteps, f.AllReduce, f.Reductions, tc.opt, tc.optSteps, tc.allreduce, tc.reductions)
			}
		})
	}
	// comm is part of every reduction: allreduce is what is left.
	tr := withSends(withSpans(base, [4]any{0, "ALL_REDUCE", 1, 300}, [4]any{1, "ALL_REDUCE", 1, 300}), [4]any{0, "SEND_F", 64, 100})
	f, err := Read(strings.NewReader(tr), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !near(f.Comm, 0.1) || !near(f.AllReduce, 0.2) {
		t.Errorf("comm %g, allreduce %g; want 0.1 and 0.2", f.Comm, f.AllReduce)
	}
	// A bad span is an error naming the event.
	if _, err := Read(strings.NewReader(withSpans(base, [4]any{0, "OPT_STEP", 1, -5})), Options{}); err == nil || !strings.Contains(err.Error(), "dur") {
		t.Errorf("err = %v; want one about dur", err)
	}
}

// TestFitMean: with Options.Mean a stage's costs are the means of its
// calls, the outlier included; without, the medians.
func TestFitMean(t *testing.T) {
	in := trace([][3][]float64{{{1000, 1000, 4000}, {500, 1500}, {300}}})
	for _, tc := range []struct {
		mean    bool
		f, i, w float64
	}{{false, 1, 1, 0.3}, {true, 2, 1, 0.3}} {
		f, err := Read(strings.NewReader(in), Options{Mean: tc.mean})
		if err != nil {
			t.Fatal(err)
		}
		if st := f.Stages[0]; !near(st.F, tc.f) || !near(st.I, tc.i) || !near(st.W, tc.w) {
			t.Errorf("Mean %v: F %g, I %g, W %g; want %g, %g, %g", tc.mean, st.F, st.I, st.W, tc.f, tc.i, tc.w)
		}
	}
}

// TestFitCost: the fit as a cost model simulates: per-stage F, I, W and
// B = I + W, B split evenly where the backward was fitted whole, comm,
// opt and allreduce; act only with a bw (sim refuses sizes at infinite
// bandwidth).
func TestFitCost(t *testing.T) {
	f := Fit{Stages: []Stage{{F: 1, I: 2, W: 3, Act: 4}, {F: 5, B: 6, BCalls: 1, Act: 1}}, Comm: 0.5, Opt: 7, AllReduce: 8}
	c := f.Cost()
	want := sim.Cost{F: []float64{1, 5}, B: []float64{5, 6}, I: []float64{2, 3}, W: []float64{3, 3}, Comm: 0.5, Opt: 7, AllReduce: 8}
	if fmt.Sprint(c) != fmt.Sprint(want) {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
	if _, err := c.Resolve(2); err != nil {
		t.Errorf("Resolve: %v", err)
	}
	f.BW = 10
	if c := f.Cost(); fmt.Sprint(c.Act) != "[4 1]" || c.BW != 10 {
		t.Errorf("with bw: act %v, bw %g; want [4 1], 10", c.Act, c.BW)
	}
}

// TestFitEach: with Options.Each every call's duration is kept by kind,
// stage and micro-batch (the mean of repeated ones), and Cost hands them to
// the simulator; calls without a micro-batch are left out.
func TestFitEach(t *testing.T) {
	in := microTrace([4]any{0, 0, "F", 1000}, [4]any{0, 1, "F", 3000}, [4]any{0, 1, "F", 5000}, [4]any{0, 0, "I", 500}, [4]any{0, 0, "W", 250}, [4]any{1, 0, "F", 1000}, [4]any{1, 0, "B", 2000})
	f, err := Read(strings.NewReader(in), Options{Each: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[sim.StepKey]float64{
		{Kind: ir.Forward, Stage: 0, Micro: 0}: 1, {Kind: ir.Forward, Stage: 0, Micro: 1}: 4,
		{Kind: ir.BackwardInput, Stage: 0, Micro: 0}: 0.5, {Kind: ir.BackwardWeight, Stage: 0, Micro: 0}: 0.25,
		{Kind: ir.Forward, Stage: 1, Micro: 0}: 1, {Kind: ir.Backward, Stage: 1, Micro: 0}: 2,
	}
	if fmt.Sprint(f.Each) != fmt.Sprint(want) {
		t.Errorf("Each = %v\nwant %v", f.Each, want)
	}
	if c := f.Cost(); len(c.Each) != len(want) {
		t.Errorf("Cost().Each = %v; want the fit's", c.Each)
	}
	if f, err := Read(strings.NewReader(in), Options{}); err != nil || f.Each != nil {
		t.Errorf("without Each: %v, %v; want nil", f.Each, err)
	}
}

// TestFitCores: with Options.Cores each call is divided by the sharing of
// the cores it ran with: two ranks' calls that overlap fully on one core
// took twice their time alone; a call alone keeps its duration; with two
// cores neither is scaled.
func TestFitCores(t *testing.T) {
	// Stage 0 on rank 0 and stage 1 on rank 1 (microTrace's stage%2),
	// calls at ts = their row: F of both from 0 (the second from 1) for
	// 4000 µs, so they overlap over 3/4 of each; I and W alone, far apart.
	in := `{"traceEvents":[` +
		`{"name":"c","cat":"compute","ph":"X","pid":0,"tid":0,"ts":0,"dur":4000,"args":{"stage":0,"micro":0,"kind":"F"}},` +
		`{"name":"c","cat":"compute","ph":"X","pid":1,"tid":0,"ts":1000,"dur":4000,"args":{"stage":1,"micro":0,"kind":"F"}},` +
		`{"name":"c","cat":"compute","ph":"X","pid":1,"tid":0,"ts":10000,"dur":2000,"args":{"stage":1,"micro":0,"kind":"I"}},` +
		`{"name":"c","cat":"compute","ph":"X","pid":1,"tid":0,"ts":20000,"dur":1000,"args":{"stage":1,"micro":0,"kind":"W"}},` +
		`{"name":"c","cat":"compute","ph":"X","pid":0,"tid":0,"ts":30000,"dur":2000,"args":{"stage":0,"micro":0,"kind":"I"}},` +
		`{"name":"c","cat":"compute","ph":"X","pid":0,"tid":0,"ts":40000,"dur":1000,"args":{"stage":0,"micro":0,"kind":"W"}}]}`
	for _, tc := range []struct {
		cores int
		f     float64
	}{{0, 4}, {2, 4}, {1, 4 / 1.75}} {
		f, err := Read(strings.NewReader(in), Options{Cores: tc.cores})
		if err != nil {
			t.Fatal(err)
		}
		for s, st := range f.Stages {
			if !near(st.F, tc.f) || !near(st.I, 2) || !near(st.W, 1) {
				t.Errorf("cores %d: stage %d: F %g, I %g, W %g; want %g, 2, 1", tc.cores, s, st.F, st.I, st.W, tc.f)
			}
		}
	}
	if _, err := Read(strings.NewReader(in), Options{Cores: -1}); err == nil || !strings.Contains(err.Error(), "cores") {
		t.Errorf("-1 cores: err = %v; want one about cores", err)
	}
}
