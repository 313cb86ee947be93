package tune

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/internal/testprog"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/sim"
)

// trace builds a trace of complete compute events: calls[s][k] holds the
// durations (µs) of stage s's calls of kind "FIW"[k], all on rank s%2.
func trace(calls [][3][]float64) string {
	var evs []string
	evs = append(evs, `{"name":"process_name","ph":"M","pid":0,"tid":0,"ts":0,"args":{"name":"rank 0"}}`)
	ts := 1e15
	for s, byKind := range calls {
		for k, durs := range byKind {
			for i, d := range durs {
				evs = append(evs, fmt.Sprintf(`{"name":"%d%c%d","cat":"compute","ph":"X","pid":%d,"tid":0,"ts":%g,"dur":%g,"args":{"kind":"%c","seq":%d,"stage":%d}}`,
					s, kinds[k], i, s%2, ts, d, kinds[k], i, s))
				ts += d + 1
			}
		}
	}
	return `{"traceEvents":[` + strings.Join(evs, ",") + `],"displayTimeUnit":"ms","otherData":{"schedule":"test","source":"measured (pipe.Timeline)"}}`
}

// TestFit: each stage's F, I and W are the medians of its calls, in ms,
// worked out by hand: odd counts take the middle call, even ones the mean
// of the middle two; an outlier does not move them.
func TestFit(t *testing.T) {
	in := trace([][3][]float64{
		{{1000, 3000, 2000}, {500}, {250, 750}},
		{{100, 100, 90000, 100}, {40, 60, 50}, {10, 30}},
	})
	f, err := Read(strings.NewReader(in), Options{Stages: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := []Stage{
		{Rank: 0, F: 2, I: 0.5, W: 0.5, Calls: [3]int{3, 1, 2}},
		{Rank: 1, F: 0.1, I: 0.05, W: 0.02, Calls: [3]int{4, 3, 2}},
	}
	if f.Schedule != "test" || f.Calls != 15 || len(f.Stages) != 2 {
		t.Fatalf("got %+v", f)
	}
	for s, w := range want {
		g := f.Stages[s]
		if g.Rank != w.Rank || g.Calls != w.Calls || !near(g.F, w.F) || !near(g.I, w.I) || !near(g.W, w.W) {
			t.Errorf("stage %d: got %+v, want %+v", s, g, w)
		}
	}
	// The model file reads back as a model of one layer per stage.
	m, err := model.Read(bytes.NewReader(f.JSON()))
	if err != nil {
		t.Fatalf("%v\n%s", err, f.JSON())
	}
	if len(m.Layers) != 2 || m.Layers[0].Name != "stage0" || m.Layers[1].Name != "stage1" ||
		m.Layers[0].F != 2 || m.Layers[1].I != 0.05 || m.Layers[1].W != 0.02 || m.Layers[0].Act != 1 || m.Layers[0].Params != 1 {
		t.Errorf("model read back as %+v\n%s", m, f.JSON())
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

// TestFitRefuses: traces tune cannot fit are errors that say why and what
// to trace instead.
func TestFitRefuses(t *testing.T) {
	full := [3][]float64{{1}, {1}, {1}}
	cases := []struct {
		name string
		in   string
		opt  Options
		want string
	}{
		{"empty", `{"traceEvents":[]}`, Options{}, "no stage calls"},
		{"metadata only", `{"traceEvents":[{"name":"process_name","ph":"M","pid":0,"args":{"name":"rank 0"}}]}`, Options{}, "no stage calls"},
		{"missing kind", trace([][3][]float64{full, {{1}, {1}, nil}}), Options{}, "stage 1 has no W calls"},
		{"missing stage", trace([][3][]float64{full, {nil, nil, nil}, full}), Options{}, "stage 1 has no F calls"},
		{"stage count", trace([][3][]float64{full, full}), Options{Stages: 4}, "calls of 2 stages but -stages is 4"},
		{"bad -stages", trace([][3][]float64{full}), Options{Stages: -1}, "-stages -1"},
		{"negative dur", trace([][3][]float64{{{-1}, {1}, {1}}}), Options{}, "dur = -1"},
		{"huge dur", trace([][3][]float64{{{2e12}, {1}, {1}}}), Options{}, "dur = 2e+12"},
		{"fractional stage", `{"traceEvents":[{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1,"args":{"stage":1.5,"kind":"F"}}]}`, Options{}, "args.stage = 1.5"},
		{"huge stage", `{"traceEvents":[{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1,"args":{"stage":1e300,"kind":"F"}}]}`, Options{}, "args.stage = 1e+300"},
		{"no stage", `{"traceEvents":[{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1,"args":{"kind":"F"}}]}`, Options{}, "args.stage = <nil>"},
		{"bad kind", `{"traceEvents":[{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1,"args":{"stage":0,"kind":"X"}}]}`, Options{}, `args.kind "X"; want F, I, W, B or R`},
		{"bad micro", `{"traceEvents":[{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1,"args":{"stage":0,"kind":"F","micro":-2}}]}`, Options{}, `args.micro = -2`},
		{"no args", `{"traceEvents":[{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1}]}`, Options{}, "no args object"},
		{"bad pid", `{"traceEvents":[{"name":"x","cat":"compute","ph":"X","pid":-3,"ts":1,"args":{"stage":0,"kind":"F"}}]}`, Options{}, "pid (the rank) -3"},
		{"no ts", `{"traceEvents":[{"name":"x","cat":"compute","ph":"X","pid":0,"args":{"stage":0,"kind":"F"}}]}`, Options{}, "no finite ts"},
		{"not json", `rank 0: 0F0`, Options{}, "tune: chrometrace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.in), tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// TestRealTrace reads the committed trace of examples/mlp (`mlp -schedule
// dualpipev -wide 32 -trace`): 8 stages of 8 micro-batches, each stage on
// the rank dualpipev's v placement puts it (stage s and 7-s on rank
// min(s, 7-s)), the wide first and last blocks at least 10 times a plain
// block's forward (they do some 50 times its arithmetic).
func TestRealTrace(t *testing.T) {
	b, err := os.ReadFile("testdata/dualpipev-wide.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Read(bytes.NewReader(b), Options{Stages: 8})
	if err != nil {
		t.Fatal(err)
	}
	if f.Schedule != "dualpipev" || f.Calls != 8*8*3 {
		t.Errorf("schedule %q, %d calls; want dualpipev, 192", f.Schedule, f.Calls)
	}
	plain := 0.0
	for s := 1; s < 7; s++ {
		plain = math.Max(plain, f.Stages[s].F)
	}
	for s, st := range f.Stages {
		if st.Rank != min(s, 7-s) || st.Calls != [3]int{8, 8, 8} {
			t.Errorf("stage %d: rank %d, calls %v; want rank %d, 8 of each kind", s, st.Rank, st.Calls, min(s, 7-s))
		}
		if wide := s == 0 || s == 7; wide && st.F < 10*plain {
			t.Errorf("stage %d: F = %g ms, not 10 times a plain stage's %g", s, st.F, plain)
		}
	}
}

// FuzzRead: no input panics, and a fit that succeeds writes a model that
// gen/model reads back with as many layers as stages.
func FuzzRead(f *testing.F) {
	if b, err := os.ReadFile("testdata/dualpipev-wide.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(trace([][3][]float64{{{1, 2}, {3}, {0}}, {{5}, {6}, {7}}})))
	f.Add([]byte(`{"traceEvents":[{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1,"dur":1e12,"args":{"stage":0,"kind":"F"}}]}`))
	// ppgen trace's sends: no op, no bytes.
	f.Add([]byte(`{"traceEvents":[{"name":"x","cat":"comm","ph":"X","pid":0,"ts":1,"dur":250,"args":{"stage":0,"kind":"SEND_F"}},{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1,"dur":3,"args":{"stage":0,"kind":"F"}},{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1,"dur":3,"args":{"stage":0,"kind":"I"}},{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1,"dur":3,"args":{"stage":0,"kind":"W"}}]}`))
	// Full backwards, micro-batches of two copies, an overlap step.
	f.Add([]byte(microTrace([4]any{0, 0, "F", 1}, [4]any{0, 0, "B", 2}, [4]any{1, 1, "F", 1}, [4]any{1, 1, "B", 2}, [4]any{1, 1, "OVERLAP_F_B", 3})))
	// A trainer's host spans.
	f.Add([]byte(withSpans(trace([][3][]float64{{{1}, {2}, {3}}}), [4]any{0, "OPT_STEP", 5, 7}, [4]any{0, "ALL_REDUCE", 9, 2}, [4]any{0, "loss", 12, 1})))
	// RECOMPUTE calls of a selective stage, with the share the program
	// recorded, and of a marked one the trace cannot price.
	f.Add([]byte(`{"traceEvents":[{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1,"dur":3,"args":{"stage":0,"kind":"F"}},{"name":"x","cat":"compute","ph":"X","pid":0,"ts":4,"dur":1,"args":{"stage":0,"kind":"R"}},{"name":"x","cat":"compute","ph":"X","pid":0,"ts":5,"dur":6,"args":{"stage":0,"kind":"B"}}],"otherData":{"recompute_cost":[0.25]}}`))
	f.Add([]byte(`{"traceEvents":[{"name":"x","cat":"compute","ph":"X","pid":0,"ts":1,"dur":3,"args":{"stage":0,"kind":"F"}},{"name":"x","cat":"compute","ph":"X","pid":0,"ts":4,"dur":1,"args":{"stage":0,"kind":"R"}},{"name":"x","cat":"compute","ph":"X","pid":0,"ts":5,"dur":6,"args":{"stage":0,"kind":"B"}}],"otherData":{"recompute_cost":[1],"recompute_cost_unknown":[0]}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		// The realisation report's fits resolve as cost models.
		if fit, err := Read(bytes.NewReader(in), Options{Mean: true, Each: true, Cores: 2}); err == nil {
			if _, err := fit.Cost().Resolve(len(fit.Stages)); err != nil {
				t.Fatalf("the fit's cost model does not resolve: %v", err)
			}
		}
		fit, err := Read(bytes.NewReader(in), Options{})
		if err != nil {
			return
		}
		m, err := model.Read(bytes.NewReader(fit.JSON()))
		if err != nil {
			t.Fatalf("the fitted model does not read back: %v\n%s", err, fit.JSON())
		}
		if len(m.Layers) != len(fit.Stages) {
			t.Fatalf("%d layers for %d stages", len(m.Layers), len(fit.Stages))
		}
	})
}

// withSends adds comm events to a trace made by trace: each is
// {stage, op, bytes, dur µs}.
func withSends(tr string, sends ...[4]any) string {
	var evs []string
	for i, s := range sends {
		kind := "send"
		if strings.HasPrefix(s[1].(string), "RECV") {
			kind = "recv"
		}
		evs = append(evs, fmt.Sprintf(`{"name":"x","cat":"comm","ph":"X","pid":0,"tid":1,"ts":%d,"dur":%v,"args":{"stage":%d,"op":%q,"kind":%q,"bytes":%d,"micro":0,"peer":1}}`,
			1000+i, s[3], s[0], s[1], kind, s[2]))
	}
	if len(evs) == 0 {
		return tr
	}
	return strings.Replace(tr, `{"traceEvents":[`, `{"traceEvents":[`+strings.Join(evs, ",")+",", 1)
}

// TestFitComm: comm and bw are the line through the median send of each
// size (worked by hand), act the median SEND_F of a stage in KiB, and the
// receives and other transfers do not count.
func TestFitComm(t *testing.T) {
	two := trace([][3][]float64{{{1}, {1}, {1}}, {{1}, {1}, {1}}})
	cases := []struct {
		name     string
		sends    [][4]any
		comm, bw float64
		act0     float64
	}{
		// 1 KiB: 2, 2, 90 ms (median 2); 3 KiB: 4 ms: the line 1 + x/1.
		{"two sizes", [][4]any{{0, "SEND_F", 1024, 2000}, {1, "SEND_B", 1024, 2000}, {0, "SEND_F", 1024, 90000}, {1, "SEND_B", 3072, 4000}, {0, "RECV_B", 1 << 20, 1e6}}, 1, 1, 1},
		// One size: the median send, bw infinite.
		{"one size", [][4]any{{0, "SEND_F", 2048, 3}, {0, "SEND_F", 2048, 5}, {1, "SEND_B", 2048, 4}}, 0.004, 0, 2},
		// Larger sends faster: no bandwidth term, the median of all.
		{"falling", [][4]any{{0, "SEND_F", 1024, 8}, {1, "SEND_B", 4096, 2}, {0, "SEND_F", 1024, 6}}, 0.006, 0, 1},
		// The line crosses 0 at a positive size: comm 0. (1, 1) and (3, 5): 2x - 1.
		{"negative intercept", [][4]any{{0, "SEND_F", 1024, 1000}, {1, "SEND_B", 3072, 5000}}, 0, 0.5, 1},
		{"none", nil, 0, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Read(strings.NewReader(withSends(two, tc.sends...)), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !near(f.Comm, tc.comm) || !near(f.BW, tc.bw) || !near(f.Stages[0].Act, tc.act0) || f.Stages[1].Act != 1 {
				t.Errorf("comm %g bw %g act %g %g; want comm %g bw %g act %g 1", f.Comm, f.BW, f.Stages[0].Act, f.Stages[1].Act, tc.comm, tc.bw, tc.act0)
			}
			m, err := model.Read(bytes.NewReader(f.JSON()))
			if err != nil {
				t.Fatalf("%v\n%s", err, f.JSON())
			}
			if !near(m.Comm, tc.comm) || !near(m.BW, tc.bw) {
				t.Errorf("model comm %g bw %g\n%s", m.Comm, m.BW, f.JSON())
			}
		})
	}
	for _, bad := range []struct {
		send [4]any
		want string
	}{
		{[4]any{0, "SEND_F", -1, 1}, "args.bytes = -1"},
		{[4]any{0, "SEND_F", 1, -5}, "dur = -5"},
		{[4]any{-1, "SEND_F", 1, 1}, "args.stage = -1"},
	} {
		if _, err := Read(strings.NewReader(withSends(two, bad.send)), Options{}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: err %v, want %q", bad.send, err, bad.want)
		}
	}
}

// TestFitCopies: with Copies 2 the calls of stage s and s+S/2 are one
// layer's (dualpipe's second copy runs the same layers): medians over both,
// worked by hand; a stage count the copies do not divide is refused.
func TestFitCopies(t *testing.T) {
	in := trace([][3][]float64{
		{{1000, 2000}, {100}, {10}}, // copy A, layer 0 (rank 0)
		{{5000}, {500}, {50}},       // copy A, layer 1 (rank 1)
		{{7000}, {700}, {70}},       // copy B, layer 0 (rank 0)
		{{3000}, {300}, {30}},       // copy B, layer 1 (rank 1)
	})
	f, err := Read(strings.NewReader(in), Options{Stages: 4, Copies: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Stages) != 2 {
		t.Fatalf("%d layers, want 2", len(f.Stages))
	}
	// Layer 0: F of 1, 2, 7 ms (median 2); I 0.1, 0.7 (0.4); W 0.01, 0.07 (0.04).
	if g := f.Stages[0]; !near(g.F, 2) || !near(g.I, 0.4) || !near(g.W, 0.04) || g.Calls != [3]int{3, 2, 2} || g.Rank != 0 {
		t.Errorf("layer 0: %+v", g)
	}
	// Layer 1: F of 5 and 3 ms (4).
	if g := f.Stages[1]; !near(g.F, 4) || g.Rank != 1 {
		t.Errorf("layer 1: %+v", g)
	}
	if _, err := Read(strings.NewReader(in), Options{Copies: 3}); err == nil || !strings.Contains(err.Error(), "4 stages do not form 3 model copies") {
		t.Errorf("copies 3: %v", err)
	}
}

// TestFitUnsized: sends without a size (ppgen trace's comm events, args.kind
// SEND_F or SEND_B and no bytes; or runtime/pipe's with bytes left out)
// are sends: comm is their median, with no bw and no act; with sized sends
// in the trace, the line is fitted to the sized ones alone.
func TestFitUnsized(t *testing.T) {
	two := trace([][3][]float64{{{1}, {1}, {1}}, {{1}, {1}, {1}}})
	sim := func(stage int, kind string, dur float64) string {
		return fmt.Sprintf(`{"name":"x","cat":"comm","ph":"X","pid":0,"tid":1,"ts":1,"dur":%v,"args":{"stage":%d,"micro":0,"kind":%q,"index":3,"peer":1,"slot":0}}`, dur, stage, kind)
	}
	add := func(tr string, evs ...string) string {
		return strings.Replace(tr, `{"traceEvents":[`, `{"traceEvents":[`+strings.Join(evs, ",")+",", 1)
	}
	for _, tc := range []struct {
		name           string
		in             string
		sends, unsized int
		comm, bw, act0 float64
	}{
		{"ppgen trace", add(two, sim(0, "SEND_F", 250), sim(1, "SEND_B", 250), sim(0, "SEND_F", 900), sim(1, "RECV_F", 5000)), 3, 3, 0.25, 0, 1},
		{"runtime without bytes", add(two, `{"name":"x","cat":"comm","ph":"X","pid":0,"ts":1,"dur":500,"args":{"stage":0,"kind":"send","op":"SEND_F"}}`), 1, 1, 0.5, 0, 1},
		// The sized sends give the line (1 + x/1, as in TestFitComm); the unsized one is left out.
		{"mixed", add(withSends(two, [4]any{0, "SEND_F", 1024, 2000}, [4]any{1, "SEND_B", 3072, 4000}), sim(0, "SEND_F", 1e6)), 3, 1, 1, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Read(strings.NewReader(tc.in), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if f.Sends != tc.sends || f.Unsized != tc.unsized || !near(f.Comm, tc.comm) || !near(f.BW, tc.bw) || !near(f.Stages[0].Act, tc.act0) {
				t.Errorf("sends %d unsized %d comm %g bw %g act %g; want %d %d %g %g %g", f.Sends, f.Unsized, f.Comm, f.BW, f.Stages[0].Act, tc.sends, tc.unsized, tc.comm, tc.bw, tc.act0)
			}
		})
	}
	if _, err := Read(strings.NewReader(add(two, `{"name":"x","cat":"comm","ph":"X","pid":0,"ts":1,"dur":5,"args":{"stage":0,"kind":"SEND_F","bytes":"many"}}`)), Options{}); err == nil || !strings.Contains(err.Error(), "args.bytes = many") {
		t.Errorf("bytes \"many\": err %v, want args.bytes refused", err)
	}
}

// microTrace builds a trace whose calls name their micro-batch: calls
// holds (stage, micro, kind, µs) rows, each on rank stage%2.
func microTrace(calls ...[4]any) string {
	var evs []string
	for i, c := range calls {
		evs = append(evs, fmt.Sprintf(`{"name":"c","cat":"compute","ph":"X","pid":%d,"tid":0,"ts":%d,"dur":%v,"args":{"stage":%d,"micro":%d,"kind":%q}}`, c[0].(int)%2, i, c[3], c[0], c[1], c[2]))
	}
	return `{"traceEvents":[` + strings.Join(evs, ",") + `],"otherData":{"schedule":"1f1b"}}`
}

// TestFitFullBackward: a trace of a schedule without split backwards
// (ppgen trace -schedule 1f1b) has B calls: each stage is fitted its F and
// B (medians by hand), written as the layer's "B", which gen/model splits
// evenly; a stage with I and W keeps them.
func TestFitFullBackward(t *testing.T) {
	in := microTrace(
		[4]any{0, 0, "F", 1000}, [4]any{0, 1, "F", 3000}, [4]any{0, 0, "B", 2000}, [4]any{0, 1, "B", 6000},
		[4]any{1, 0, "F", 500}, [4]any{1, 0, "I", 700}, [4]any{1, 0, "W", 300},
		[4]any{0, 1, "OVERLAP_F_B", 90000}, // one event for two calls: skipped
	)
	f, err := Read(strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Overlapped != 1 || f.Calls != 7 {
		t.Errorf("%d calls, %d overlap steps skipped; want 7 and 1", f.Calls, f.Overlapped)
	}
	if g := f.Stages[0]; !near(g.F, 2) || !near(g.B, 4) || g.I != 0 || g.W != 0 || g.BCalls != 2 || g.Calls != [3]int{2, 0, 0} {
		t.Errorf("stage 0: %+v; want F 2, B 4 from 2 B calls", g)
	}
	if g := f.Stages[1]; !near(g.F, 0.5) || !near(g.I, 0.7) || !near(g.W, 0.3) || g.B != 0 {
		t.Errorf("stage 1: %+v; want F 0.5, I 0.7, W 0.3", g)
	}
	m, err := model.Read(bytes.NewReader(f.JSON()))
	if err != nil {
		t.Fatalf("%v\n%s", err, f.JSON())
	}
	if l := m.Layers[0]; !near(l.I, 2) || !near(l.W, 2) {
		t.Errorf("layer 0 reads back as I %g, W %g; want B = 4 split evenly\n%s", l.I, l.W, f.JSON())
	}
	if l := m.Layers[1]; !near(l.I, 0.7) || !near(l.W, 0.3) {
		t.Errorf("layer 1 reads back as I %g, W %g; want 0.7, 0.3", l.I, l.W)
	}
	// A stage with I calls but neither W nor B is still refused.
	bad := microTrace([4]any{0, 0, "F", 1}, [4]any{0, 0, "I", 1})
	if _, err := Read(strings.NewReader(bad), Options{}); err == nil || !strings.Contains(err.Error(), "stage 0 has no W calls") {
		t.Errorf("I without W: %v", err)
	}
}

// TestCopiesFromMicroBatches: the copies are read from the micro-batches
// (dualpipe's: micro-batches 0, 1 on stages 0, 1 and 2, 3 on stages 2, 3);
// a -copies the micro-batches contradict is refused, either way.
func TestCopiesFromMicroBatches(t *testing.T) {
	var rows [][4]any
	for s := range 4 {
		for _, m := range [][]int{{0, 1}, {0, 1}, {2, 3}, {2, 3}}[s] {
			for _, k := range []string{"F", "I", "W"} {
				rows = append(rows, [4]any{s, m, k, 1000 * (s%2 + 1)})
			}
		}
	}
	two := microTrace(rows...)
	f, err := Read(strings.NewReader(two), Options{})
	if err != nil || f.Copies != 2 || len(f.Stages) != 2 || !near(f.Stages[1].F, 2) {
		t.Fatalf("two copies: %+v, %v; want 2 layers from 2 copies", f, err)
	}
	if _, err := Read(strings.NewReader(two), Options{Copies: 1}); err == nil || !strings.Contains(err.Error(), "-copies 1, but the trace's micro-batches, over its 4 stages, each run one half of them: 2 model copies") {
		t.Errorf("-copies 1 on two copies: %v", err)
	}
	// One copy: micro-batch 0 runs all four stages.
	one := microTrace(append(rows, [4]any{3, 0, "F", 1000})...)
	if f, err := Read(strings.NewReader(one), Options{}); err != nil || f.Copies != 1 || len(f.Stages) != 4 {
		t.Errorf("one copy: %+v, %v; want 4 layers", f, err)
	}
	if _, err := Read(strings.NewReader(one), Options{Copies: 2}); err == nil || !strings.Contains(err.Error(), "-copies 2, but the trace's micro-batches, over its 4 stages, run stages of both halves: one model copy") {
		t.Errorf("-copies 2 on one copy: %v", err)
	}
}

// TestFitRecompute: RECOMPUTE calls fit the stage's R, the median: the
// measured timeline's R calls (args.kind "R") and a simulated trace's
// host events (args.kind "RECOMPUTE": ppgen trace of a -recompute
// program, here 1f1b P = 2, M = 4 with R = 0.5 on stage 0 and 1.5 on
// stage 1, one cost unit a ms), written as the layer's "R", which gen/model
// reads back; a stage without any keeps none (R defaults to F).
func TestFitRecompute(t *testing.T) {
	in := microTrace(
		[4]any{0, 0, "F", 1000}, [4]any{0, 0, "R", 400}, [4]any{0, 1, "R", 600}, [4]any{0, 0, "I", 1000}, [4]any{0, 0, "W", 1000},
		[4]any{1, 0, "F", 500}, [4]any{1, 0, "I", 700}, [4]any{1, 0, "W", 300},
	)
	f, err := Read(strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g := f.Stages[0]; !near(g.R, 0.5) || g.RCalls != 2 {
		t.Errorf("stage 0: %+v; want R 0.5 from 2 calls", g)
	}
	if g := f.Stages[1]; g.R != 0 || g.RCalls != 0 {
		t.Errorf("stage 1: %+v; want no R", g)
	}
	m, err := model.Read(bytes.NewReader(f.JSON()))
	if err != nil {
		t.Fatalf("%v\n%s", err, f.JSON())
	}
	r0, ok0 := m.Layers[0].Kinds["R"]
	if _, ok1 := m.Layers[1].Kinds["R"]; !ok0 || !near(r0, 0.5) || ok1 {
		t.Errorf("layers read back with R %v, %v; want 0.5 and none\n%s", m.Layers[0].Kinds, m.Layers[1].Kinds, f.JSON())
	}

	p, _, err := passes.Lower(testprog.OneF1B(2, 4), passes.Options{Set: map[string]string{"recompute": "full"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sim.ParseCost("F=1,B=2,R=0.5:1.5", 2)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sim.Run(p, c)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := sim.Trace(r, p, sim.TraceMeta{Schedule: "1f1b"})
	if err != nil {
		t.Fatal(err)
	}
	f, err = Read(bytes.NewReader(tr), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range []float64{0.5, 1.5} {
		if g := f.Stages[s]; !near(g.R, want) || g.RCalls != 4 {
			t.Errorf("simulated stage %d: R %g from %d calls; want %g from 4", s, g.R, g.RCalls, want)
		}
	}
}

// TestFitRecomputeShare: under a selective policy a RECOMPUTE re-runs a
// share of its stage, and R is fitted as the whole stage's: each R call
// divided by the share of the stage's R it cost, from the trace's
// otherData.recompute_cost (what pipe.Timeline and ppgen trace write) or
// Options.RecomputeCost, worked out by hand; a stage of marked layers
// whose share the trace does not know (recompute_cost_unknown) is refused
// without Options.RecomputeCost; and a simulated trace of selective
// programs gives back the R it was simulated with.
func TestFitRecomputeShare(t *testing.T) {
	calls := microTrace(
		[4]any{0, 0, "F", 1000}, [4]any{0, 0, "R", 400}, [4]any{0, 1, "R", 600}, [4]any{0, 0, "I", 1000}, [4]any{0, 0, "W", 1000},
		[4]any{1, 0, "F", 500}, [4]any{1, 0, "R", 300}, [4]any{1, 0, "I", 700}, [4]any{1, 0, "W", 300},
	)
	with := func(other string) string {
		return strings.Replace(calls, `"otherData":{"schedule":"1f1b"}`, `"otherData":{"schedule":"1f1b",`+other+`}`, 1)
	}
	for _, tc := range []struct {
		name   string
		trace  string
		opt    Options
		r0, r1 float64 // ms
		share0 float64
		err    string
	}{
		// 400 and 600 µs of a quarter: 1600 and 2400, median 2000 µs.
		{name: "trace's share", trace: with(`"recompute_cost":[0.25,1]`), r0: 2, r1: 0.3, share0: 0.25},
		// Options' half: 800 and 1200, median 1000 µs; stage 1 a fifth: 1500 µs.
		{name: "given share", trace: with(`"recompute_cost":[0.25,1]`), opt: Options{RecomputeCost: []float64{0.5, 0.2}}, r0: 1, r1: 1.5, share0: 0.5},
		{name: "no share: whole", trace: calls, r0: 0.5, r1: 0.3, share0: 1},
		{name: "marked, unknown", trace: with(`"recompute_cost":[1,1],"recompute_cost_unknown":[0]`), err: "stage 0 has RECOMPUTE calls of the layers a -model file marks"},
		{name: "marked, given", trace: with(`"recompute_cost":[1,1],"recompute_cost_unknown":[0]`), opt: Options{RecomputeCost: []float64{0.25}}, r0: 2, r1: 0.3, share0: 0.25},
		{name: "bad given", trace: calls, opt: Options{RecomputeCost: []float64{1.5}}, err: "stage 0's share 1.5"},
		{name: "bad trace's", trace: with(`"recompute_cost":[0,1]`), err: "otherData.recompute_cost[0] is 0"},
		{name: "short trace's", trace: with(`"recompute_cost":[0.5]`), err: "want one share per stage of the trace's 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Read(strings.NewReader(tc.trace), tc.opt)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g := f.Stages[0]; !near(g.R, tc.r0) || g.RShare != tc.share0 || g.RCalls != 2 {
				t.Errorf("stage 0: R %g, share %g from %d calls; want R %g, share %g from 2", g.R, g.RShare, g.RCalls, tc.r0, tc.share0)
			}
			if g := f.Stages[1]; !near(g.R, tc.r1) {
				t.Errorf("stage 1: R %g; want %g", g.R, tc.r1)
			}
		})
	}

	// Each keeps the R calls too, as the whole stage's (the simulator
	// charges a replayed RECOMPUTE its share of them).
	f, err := Read(strings.NewReader(with(`"recompute_cost":[0.25,1]`)), Options{Each: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Each[sim.StepKey{Kind: abi.Recompute, Stage: 0, Micro: 1}]; !near(got, 2.4) {
		t.Errorf("Each of 0R1: %g ms; want 0.6 / 0.25 = 2.4", got)
	}

	for _, policy := range []string{"selective:0.5", "selective:0=0.25,1=0.75"} {
		p, _, err := passes.Lower(testprog.OneF1B(2, 4), passes.Options{Set: map[string]string{"recompute": policy}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := sim.ParseCost("F=1,B=2,R=0.5:1.5", 2)
		if err != nil {
			t.Fatal(err)
		}
		r, err := sim.Run(p, c)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := sim.Trace(r, p, sim.TraceMeta{Schedule: "1f1b"})
		if err != nil {
			t.Fatal(err)
		}
		f, err := Read(bytes.NewReader(tr), Options{})
		if err != nil {
			t.Fatal(err)
		}
		for s, want := range []float64{0.5, 1.5} {
			if g := f.Stages[s]; !near(g.R, want) || g.RCalls != 4 || !near(g.RShare, p.RecomputeCostPart(s)) || g.RShare == 1 {
				t.Errorf("-recompute %s, simulated stage %d: R %g from %d calls of share %g; want the whole stage's %g from 4 of share %g", policy, s, g.R, g.RCalls, g.RShare, want, p.RecomputeCostPart(s))
			}
		}
	}
}

// TestFitRecomputeMean: Options.Mean fits R to the mean of its calls as it
// does F, I and W (a slow RECOMPUTE counts, as the measured step saw it);
// the default is the median.
func TestFitRecomputeMean(t *testing.T) {
	trace := microTrace(
		[4]any{0, 0, "F", 1000}, [4]any{0, 0, "R", 400}, [4]any{0, 1, "R", 600}, [4]any{0, 2, "R", 1400},
		[4]any{0, 0, "I", 1000}, [4]any{0, 0, "W", 1000},
	)
	for _, tc := range []struct {
		opt  Options
		want float64 // ms
	}{
		{Options{}, 0.6},
		{Options{Mean: true}, 0.8},
	} {
		f, err := Read(strings.NewReader(trace), tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		if g := f.Stages[0]; !near(g.R, tc.want) || g.RCalls != 3 {
			t.Errorf("Mean %v: R %g from %d calls; want %g from 3", tc.opt.Mean, g.R, g.RCalls, tc.want)
		}
	}
}
