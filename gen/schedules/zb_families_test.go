package schedules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// zbtCase is one configuration of a zero-bubble family.
type zbtCase struct {
	name    string
	p, v, m int
	opts    ir.Options
}

func (c zbtCase) String() string {
	s := fmt.Sprintf("%s P=%d V=%d M=%d", c.name, c.p, c.v, c.m)
	if c.opts.LessMemory {
		s += " less-memory"
	}
	return s
}

// zbtGrid returns, per family, the (P, V, M) grid the feasibility test
// covers: P = 1..8 (even only for dualpipe), M over every legal value up to
// 4P (3P for the V > 1 interleaved cases).
func zbtGrid() []zbtCase {
	var cs []zbtCase
	for p := 1; p <= 8; p++ {
		for m := 1; m <= 4*p; m++ {
			for _, name := range []string{"zb-h1", "zb-h2"} {
				cs = append(cs, zbtCase{name: name, p: p, v: 1, m: m})
			}
			for _, name := range []string{"zbv", "v-half", "v-min"} {
				cs = append(cs, zbtCase{name: name, p: p, v: 2, m: m})
			}
			if m >= 2*p {
				cs = append(cs, zbtCase{name: "dualpipev", p: p, v: 2, m: m})
				if p%2 == 0 && m%2 == 0 {
					cs = append(cs, zbtCase{name: "dualpipe", p: p, v: 2, m: m})
				}
			}
			cs = append(cs, zbtCase{name: "interleaved-zb", p: p, v: 1, m: m})
			if m <= 3*p {
				for v := 2; v <= 3; v++ {
					cs = append(cs, zbtCase{name: "interleaved-zb", p: p, v: v, m: m})
					cs = append(cs, zbtCase{name: "interleaved-zb", p: p, v: v, m: m, opts: ir.Options{LessMemory: true}})
				}
			}
		}
	}
	return cs
}

func TestZBFeasibleGrid(t *testing.T) {
	for _, c := range zbtGrid() {
		prog := zbtBuild(t, c.name, c.p, c.v, c.m, c.opts)
		wantStages := c.p * c.v
		if prog.Stages() != wantStages {
			t.Errorf("%v: %d stages, want %d", c, prog.Stages(), wantStages)
			continue
		}
		if err := zbtCheck(prog, zbtSpanOf(c.name, prog)); err != nil {
			t.Errorf("%v: %v", c, err)
		}
	}
}

// Every family's program survives the text form (overlaps included).
func TestZBTextRoundTrip(t *testing.T) {
	for _, c := range []zbtCase{
		{name: "zb-h1", p: 4, v: 1, m: 8}, {name: "zb-h2", p: 4, v: 1, m: 8},
		{name: "interleaved-zb", p: 4, v: 2, m: 8}, {name: "zbv", p: 4, v: 2, m: 8},
		{name: "v-half", p: 4, v: 2, m: 8}, {name: "v-min", p: 4, v: 2, m: 8},
		{name: "dualpipe", p: 4, v: 2, m: 8}, {name: "dualpipev", p: 4, v: 2, m: 8},
	} {
		prog := zbtBuild(t, c.name, c.p, c.v, c.m, c.opts)
		back, err := ir.ParseText(ir.FormatText(prog))
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		for r := range prog.Ranks {
			if len(back.Ranks[r]) != len(prog.Ranks[r]) {
				t.Fatalf("%v: rank %d has %d steps after the round trip, want %d", c, r, len(back.Ranks[r]), len(prog.Ranks[r]))
			}
			for i := range prog.Ranks[r] {
				if !back.Ranks[r][i].SameAction(prog.Ranks[r][i]) {
					t.Fatalf("%v: rank %d step %d: %s after the round trip, want %s", c, r, i, back.Ranks[r][i], prog.Ranks[r][i])
				}
			}
		}
	}
}

// ZB-H1: at F = I = W = 1 the whole-iteration bubble is (P-1)/(3M+P-1) for
// M ≥ P; below that the first gradient reaches rank 0 at 2P-1 and rank 0
// still has M I's and M W's to run, so the makespan is 2M+2P-1. Peak ≤ P.
func TestZBH1Bubble(t *testing.T) {
	for p := 1; p <= 8; p++ {
		for m := 1; m <= 4*p; m++ {
			prog := zbtBuild(t, "zb-h1", p, 1, m, ir.Options{})
			res := zbtSim(t, prog, zbtAllStages(prog))
			if m >= p {
				// bubble = idle / (P·makespan) == (P-1)/(3M+P-1), compared exactly.
				if res.wholeIdle*(3*m+p-1) != (p-1)*p*res.makespan {
					t.Errorf("zb-h1 P=%d M=%d: bubble %d/%d, want (P-1)/(3M+P-1) = %d/%d",
						p, m, res.wholeIdle, p*res.makespan, p-1, 3*m+p-1)
				}
			} else if want := 2*m + 2*p - 1; res.makespan != want {
				t.Errorf("zb-h1 P=%d M=%d (M < P): makespan %d, want 2M+2P-1 = %d", p, m, res.makespan, want)
			}
			if res.maxPeak > p {
				t.Errorf("zb-h1 P=%d M=%d: peak %d live chunks, want ≤ P = %d", p, m, res.maxPeak, p)
			}
		}
	}
}

// ZB-H2: no bubble between each rank's first and last step for M ≥ 2P, at
// most 2P live chunks always, and never slower than ZB-H1.
func TestZBH2StageSpan(t *testing.T) {
	for p := 1; p <= 8; p++ {
		for m := 1; m <= 4*p; m++ {
			prog := zbtBuild(t, "zb-h2", p, 1, m, ir.Options{})
			res := zbtSim(t, prog, zbtAllStages(prog))
			if m >= 2*p && res.spanIdle != 0 {
				t.Errorf("zb-h2 P=%d M=%d: stage-span idle %d (bubble %.4f), want 0", p, m, res.spanIdle, res.spanBubble)
			}
			if res.maxPeak > 2*p {
				t.Errorf("zb-h2 P=%d M=%d: peak %d live chunks, want ≤ 2P = %d", p, m, res.maxPeak, 2*p)
			}
			h1 := zbtBuild(t, "zb-h1", p, 1, m, ir.Options{})
			if r1 := zbtSim(t, h1, zbtAllStages(h1)); res.makespan > r1.makespan {
				t.Errorf("zb-h2 P=%d M=%d: makespan %d, zb-h1's is %d", p, m, res.makespan, r1.makespan)
			}
		}
	}
}

// ZB-V: P = 8, M = 32 has a whole-iteration bubble ≤ 0.036 and at most 2P
// live chunks (P stages' worth, a chunk being half a stage); for M ≥ 2P-1
// every rank idles only P-1 units: makespan 6M+P-1.
func TestZBVBubble(t *testing.T) {
	prog := zbtBuild(t, "zbv", 8, 2, 32, ir.Options{})
	res := zbtSim(t, prog, zbtAllStages(prog))
	if res.wholeBubble > 0.036 {
		t.Errorf("zbv P=8 M=32: whole-iteration bubble %.4f, want ≤ 0.036", res.wholeBubble)
	}
	if res.maxPeak > 16 {
		t.Errorf("zbv P=8 M=32: peak %d live chunks, want ≤ 2P = 16", res.maxPeak)
	}
	for p := 1; p <= 8; p++ {
		for m := 1; m <= 4*p; m++ {
			prog := zbtBuild(t, "zbv", p, 2, m, ir.Options{})
			res := zbtSim(t, prog, zbtAllStages(prog))
			if m >= 2*p-1 && res.makespan != 6*m+p-1 {
				t.Errorf("zbv P=%d M=%d: makespan %d, want 6M+P-1 = %d", p, m, res.makespan, 6*m+p-1)
			}
			if res.maxPeak > 2*p {
				t.Errorf("zbv P=%d M=%d: peak %d live chunks, want ≤ 2P = %d", p, m, res.maxPeak, 2*p)
			}
		}
	}
}

// interleaved-zb: never slower than interleaved at the same P, V, M (B = 2
// against I + W = 1 + 1), strictly faster for P > 1, within interleaved's
// peak memory; with V = 1 it is zb-h1.
func TestInterleavedZBBeatsInterleaved(t *testing.T) {
	if _, err := Lookup("interleaved"); err != nil {
		t.Skip("interleaved is not registered")
	}
	for _, p := range []int{1, 2, 3, 4, 8} {
		for _, v := range []int{1, 2, 3} {
			for _, m := range []int{1, p - 1, p, p + 1, 2 * p, 3*p + 1, 4 * p} {
				for _, less := range []bool{false, true} {
					if m < 1 || (less && v == 1) {
						continue
					}
					opts := ir.Options{LessMemory: less}
					il := zbtBuild(t, "interleaved", p, v, m, opts)
					zb := zbtBuild(t, "interleaved-zb", p, v, m, opts)
					ri, rz := zbtSim(t, il, zbtAllStages(il)), zbtSim(t, zb, zbtAllStages(zb))
					c := zbtCase{name: "interleaved-zb", p: p, v: v, m: m, opts: opts}
					if rz.makespan > ri.makespan || (p > 1 && rz.makespan == ri.makespan) {
						t.Errorf("%v: makespan %d, interleaved's %d", c, rz.makespan, ri.makespan)
					}
					if rz.maxPeak > ri.maxPeak {
						t.Errorf("%v: peak %d live chunks, interleaved's %d", c, rz.maxPeak, ri.maxPeak)
					}
				}
			}
			if v == 1 {
				a := zbtBuild(t, "interleaved-zb", p, 1, 2*p+1, ir.Options{})
				b := zbtBuild(t, "zb-h1", p, 1, 2*p+1, ir.Options{})
				if ir.FormatText(a) != ir.FormatText(b) {
					t.Errorf("interleaved-zb P=%d V=1 differs from zb-h1:\n%s\n%s", p, ir.FormatText(a), ir.FormatText(b))
				}
			}
		}
	}
}

// The figures the report quotes, at P = 8, M = 32 (F = I = W = 1, B = 2).
func TestZBReportFigures(t *testing.T) {
	for _, c := range []zbtCase{
		{name: "zb-h1", p: 8, v: 1, m: 32}, {name: "zb-h2", p: 8, v: 1, m: 32},
		{name: "interleaved", p: 8, v: 2, m: 32}, {name: "interleaved-zb", p: 8, v: 2, m: 32},
		{name: "zbv", p: 8, v: 2, m: 32}, {name: "v-half", p: 8, v: 2, m: 32}, {name: "v-min", p: 8, v: 2, m: 32},
		{name: "dualpipe", p: 8, v: 2, m: 32}, {name: "dualpipev", p: 8, v: 2, m: 32},
	} {
		if _, err := Lookup(c.name); err != nil {
			continue
		}
		prog := zbtBuild(t, c.name, c.p, c.v, c.m, c.opts)
		res := zbtSim(t, prog, zbtSpanOf(c.name, prog))
		idle := 0
		for _, b := range res.busy {
			idle = max(idle, res.makespan-b)
		}
		t.Logf("%-28v makespan %3d  whole bubble %.4f  stage-span bubble %.4f  max idle/rank %3d  peak %2d chunks  overlaps %d",
			c, res.makespan, res.wholeBubble, res.spanBubble, idle, res.maxPeak, res.overlapCount)
	}
}

// zbtZBVReference writes the ZB-V order the plain way of the reference
// implementations (sail-sg's handcrafted ZB-V, PyTorch's ScheduleZBVZeroBubble):
// pad to max(M, 2P-1) micro-batches, emit every step, drop the padding.
func zbtZBVReference(p, m int) string {
	n := max(m, 2*p-1)
	var b []string
	for r := 0; r < p; r++ {
		d, u := r, 2*p-1-r
		var fd, fu, bd, bu int
		var ops [][3]int // kind (0 F, 1 I, 2 W), stage, micro
		put := func(k, s, mb int) { ops = append(ops, [3]int{k, s, mb}) }
		for i := 0; i < 2*(p-r)-1; i++ {
			put(0, d, fd)
			fd++
		}
		for i := 0; i < r; i++ {
			put(0, u, fu)
			fu++
			put(0, d, fd)
			fd++
		}
		for i := 0; i < p-r; i++ {
			put(0, u, fu)
			fu++
			put(1, u, bu)
			put(2, u, bu)
			bu++
		}
		for fu < fd || fd < n {
			if fd < n {
				put(0, d, fd)
				fd++
			}
			put(1, d, bd)
			put(2, d, bd)
			bd++
			put(0, u, fu)
			fu++
			put(1, u, bu)
			put(2, u, bu)
			bu++
		}
		wd, wu := bd, bu
		for i := 0; i < r; i++ {
			put(1, d, bd)
			bd++
			put(1, u, bu)
			bu++
		}
		for i := 0; i < p-r; i++ {
			put(1, d, bd)
			bd++
			put(2, d, wd)
			wd++
		}
		for ; wu < bu; wu++ {
			put(2, u, wu)
		}
		for ; wd < bd; wd++ {
			put(2, d, wd)
		}
		line := fmt.Sprintf("rank %d:", r)
		for _, o := range ops {
			if o[2] < m {
				line += fmt.Sprintf(" %d%s%d", o[1], [3]string{"F", "I", "W"}[o[0]], o[2])
			}
		}
		b = append(b, line+"\n")
	}
	return strings.Join(b, "")
}

func TestZBVMatchesReference(t *testing.T) {
	for p := 1; p <= 8; p++ {
		for m := 1; m <= 4*p; m++ {
			got := ir.FormatText(zbtBuild(t, "zbv", p, 2, m, ir.Options{}))
			if want := zbtZBVReference(p, m); got != want {
				t.Errorf("zbv P=%d M=%d:\n got %s\nwant %s", p, m, got, want)
			}
		}
	}
}
