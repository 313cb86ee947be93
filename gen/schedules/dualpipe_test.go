package schedules

import (
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
