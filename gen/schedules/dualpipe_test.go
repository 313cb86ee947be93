package schedules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// The DualPipe bubbles, read as each rank's idle time (makespan minus its own
// compute) at F = I = W = 1, B = 2 and F&B = F+B = 3 (an overlap costs the sum
// of its halves in the tests' simulator):
//
//	dualpipev  (P-1)(F&B+B-3W)    in chunk costs (one chunk = half a stage)
//	dualpipe   (P/2-1)(F&B+B-3W)  in one copy's stage costs
const (
	zbtF, zbtB, zbtW = 1, 2, 1
	zbtFB            = zbtF + zbtB
)

func TestDualPipeVBubble(t *testing.T) {
	for p := 1; p <= 8; p++ {
		want := (p - 1) * (zbtFB + zbtB - 3*zbtW)
		for m := 2 * p; m <= 4*p; m++ {
			prog := zbtBuild(t, "dualpipev", p, 2, m, ir.Options{})
			res := zbtSim(t, prog, zbtAllStages(prog))
			for r := 0; r < p; r++ {
				if idle := res.makespan - res.busy[r]; idle != want {
					t.Errorf("dualpipev P=%d M=%d rank %d: idle %d, want (P-1)(F&B+B-3W) = %d", p, m, r, idle, want)
				}
			}
			if res.maxPeak > 2*p+1 {
				t.Errorf("dualpipev P=%d M=%d: peak %d chunks, want ≤ 2P+1 = %d", p, m, res.maxPeak, 2*p+1)
			}
			zbtCheckOverlaps(t, "dualpipev", prog, res, p, m)
		}
	}
}

func TestDualPipeBubble(t *testing.T) {
	for p := 2; p <= 8; p += 2 {
		want := (p/2 - 1) * (zbtFB + zbtB - 3*zbtW)
		for m := 2 * p; m <= 4*p; m += 2 {
			prog := zbtBuild(t, "dualpipe", p, 2, m, ir.Options{})
			res := zbtSim(t, prog, zbtDualSpan(prog))
			for r := 0; r < p; r++ {
				if idle := res.makespan - res.busy[r]; idle != want {
					t.Errorf("dualpipe P=%d M=%d rank %d: idle %d, want (P/2-1)(F&B+B-3W) = %d", p, m, r, idle, want)
				}
			}
			if res.maxPeak > p+1 {
				t.Errorf("dualpipe P=%d M=%d: peak %d chunks, want ≤ P+1 = %d", p, m, res.maxPeak, p+1)
			}
			zbtCheckOverlaps(t, "dualpipe", prog, res, p, m)
		}
	}
}

// zbtCheckOverlaps checks the shape of the OVERLAP_F_B composites: a forward
// then a full backward of the rank's other stage; 2·(M/D - 2·half + h + 1)
// + (half-h-1) of them per rank in the steady phases, less one on the
// turning rank (D = 2 copies and half = P/2 for dualpipe; D = 1, half = P for
// dualpipev; h the rank's depth).
func zbtCheckOverlaps(t *testing.T, name string, prog ir.Program, res zbtResult, p, m int) {
	t.Helper()
	half, mh := p, m
	if name == "dualpipe" {
		half, mh = p/2, m/2
	}
	total := 0
	for r, steps := range prog.Ranks {
		n := 0
		for _, st := range steps {
			if !st.Kind.IsOverlap() {
				continue
			}
			n++
			if st.Kind != ir.OverlapFB || st.Sub[0].Kind != ir.Forward || st.Sub[1].Kind != ir.Backward || st.Sub[0].Stage == st.Sub[1].Stage {
				t.Fatalf("%s P=%d M=%d rank %d: composite %s, want (F;B) of the rank's two stages as OVERLAP_F_B", name, p, m, r, st)
			}
		}
		h := min(r, p-1-r)
		if name == "dualpipev" {
			h = r
		}
		want := 2*(mh-2*half+h+1) + (half - h - 1)
		if h == half-1 {
			want--
		}
		if n != want {
			t.Errorf("%s P=%d M=%d rank %d: %d overlaps, want %d", name, p, m, r, n, want)
		}
		total += n
	}
	if total != res.overlapCount {
		t.Errorf("%s P=%d M=%d: simulator ran %d overlaps, program has %d", name, p, m, res.overlapCount, total)
	}
}

// zbtDualReference writes DualPipe's order the way DeepSeek's dualpipe.py
// and dualpipev.py (and PyTorch's ScheduleDualPipeV) state it: local phases
// 0 and 1, mapped to a model direction by "phase XOR rank in the second
// half" (dualpipe) or to the down/up stage (dualpipev), per-direction chunk
// counters, and a FIFO of W's for the backwards that ran as I.
func zbtDualReference(v bool, p, m int) string {
	var out strings.Builder
	ranks, chunks := p, m // dualpipev: one pipeline of P ranks, M chunks
	if !v {
		chunks = m / 2 // dualpipe: M/2 chunks enter at each end
	}
	for r := 0; r < p; r++ {
		second := !v && r >= p/2
		halfRanks, halfRank := p, r
		if !v {
			halfRanks, halfRank = p/2, min(r, p-1-r)
		}
		middle := halfRank == halfRanks-1
		stageOf := func(phase int) int { // local phase -> stage on this rank
			dir := phase
			if second {
				dir ^= 1
			}
			if dir == 0 {
				return r
			}
			return 2*ranks - 1 - r
		}
		microOf := func(stage, k int) int {
			if !v && stage >= p {
				return chunks + k
			}
			return k
		}
		var nf, nb [2]int
		var wq []string
		var steps []string
		f := func(phase int) string {
			s := stageOf(phase)
			nf[phase]++
			return fmt.Sprintf("%dF%d", s, microOf(s, nf[phase]-1))
		}
		b := func(phase int, zb bool) string {
			s := stageOf(phase)
			nb[phase]++
			mb := microOf(s, nb[phase]-1)
			if zb {
				wq = append(wq, fmt.Sprintf("%dW%d", s, mb))
				return fmt.Sprintf("%dI%d", s, mb)
			}
			return fmt.Sprintf("%dB%d", s, mb)
		}
		w := func() {
			if len(wq) > 0 {
				steps = append(steps, wq[0])
				wq = wq[1:]
			}
		}
		fb := func(p0, p1 int) string { return "(" + f(p0) + ";" + b(p1, false) + ")OVERLAP_F_B" }
		for i := 0; i < (halfRanks-halfRank-1)*2; i++ {
			steps = append(steps, f(0))
		}
		for i := 0; i < halfRank+1; i++ {
			steps = append(steps, f(0), f(1))
		}
		for i := 0; i < halfRanks-halfRank-1; i++ {
			steps = append(steps, b(1, true))
			w()
			steps = append(steps, f(1))
		}
		for i := 0; i < chunks-2*halfRanks+halfRank+1; i++ {
			if i == 0 && middle {
				steps = append(steps, f(0), b(1, false))
			} else {
				steps = append(steps, fb(0, 1))
			}
			steps = append(steps, fb(1, 0))
		}
		for i := 0; i < halfRanks-halfRank-1; i++ {
			steps = append(steps, b(1, false), fb(1, 0))
		}
		zb, step6 := false, halfRank+1
		for i := 0; i < step6; i++ {
			if i == step6/2 && halfRank%2 == 1 {
				zb = true
			}
			steps = append(steps, b(1, zb))
			if i == step6/2 && halfRank%2 == 0 {
				zb = true
			}
			steps = append(steps, b(0, zb))
		}
		for i := 0; i < halfRanks-halfRank-1; i++ {
			w()
			steps = append(steps, b(0, true))
		}
		for i := 0; i < halfRank+1; i++ {
			w()
		}
		fmt.Fprintf(&out, "rank %d:", r)
		for _, s := range steps {
			out.WriteString(" " + s)
		}
		out.WriteByte('\n')
	}
	return out.String()
}

func TestDualPipeMatchesReference(t *testing.T) {
	for p := 1; p <= 8; p++ {
		for m := 2 * p; m <= 4*p; m++ {
			got := ir.FormatText(zbtBuild(t, "dualpipev", p, 2, m, ir.Options{}))
			if want := zbtDualReference(true, p, m); got != want {
				t.Errorf("dualpipev P=%d M=%d:\n got %s\nwant %s", p, m, got, want)
			}
			if p%2 == 0 && m%2 == 0 {
				got := ir.FormatText(zbtBuild(t, "dualpipe", p, 2, m, ir.Options{}))
				if want := zbtDualReference(false, p, m); got != want {
					t.Errorf("dualpipe P=%d M=%d:\n got %s\nwant %s", p, m, got, want)
				}
			}
		}
	}
}
