package schedules

import (
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// 1F1B's idle time per rank in the tests' chunk costs: a full stage is two
// chunks, so F = 2 and B = 4 per micro-batch and 1F1B idles (P-1)(F+B).
func zbtOneF1BIdle(p int) int { return (p - 1) * (2 + 4) }

// V-Half holds at most (P+2)/2 stages' worth of activations (a chunk is half
// a stage) and, for M ≥ 2P, idles at most half of 1F1B's bubble; V-Min holds
// at most (P+4)/3 stages' worth and idles at most three quarters of 1F1B's
// (about two thirds).
func TestVShapeMemoryAndBubble(t *testing.T) {
	for p := 1; p <= 12; p++ {
		for m := 1; m <= 3*p+2; m++ {
			half := zbtBuild(t, "v-half", p, 2, m, ir.Options{})
			rh := zbtSim(t, half, zbtAllStages(half))
			if 2*rh.maxPeak > 2*(p+2) { // peak/2 ≤ (P+2)/2
				t.Errorf("v-half P=%d M=%d: peak %d chunks = %.1f stages, want ≤ (P+2)/2 = %.1f", p, m, rh.maxPeak, float64(rh.maxPeak)/2, float64(p+2)/2)
			}
			vmin := zbtBuild(t, "v-min", p, 2, m, ir.Options{})
			rm := zbtSim(t, vmin, zbtAllStages(vmin))
			if 3*rm.maxPeak > 2*(p+4) { // peak/2 ≤ (P+4)/3
				t.Errorf("v-min P=%d M=%d: peak %d chunks = %.1f stages, want ≤ (P+4)/3 = %.2f", p, m, rm.maxPeak, float64(rm.maxPeak)/2, float64(p+4)/3)
			}
			if m < 2*p {
				continue
			}
			ref := zbtOneF1BIdle(p)
			for r := 0; r < p; r++ {
				if idle := rh.makespan - rh.busy[r]; 2*idle > ref {
					t.Errorf("v-half P=%d M=%d rank %d: idle %d, want ≤ half of 1F1B's %d", p, m, r, idle, ref)
				}
				if idle := rm.makespan - rm.busy[r]; 4*idle > 3*ref {
					t.Errorf("v-min P=%d M=%d rank %d: idle %d, want ≤ 3/4 of 1F1B's %d", p, m, r, idle, ref)
				}
			}
		}
	}
}

// Less memory costs bubble: at P = 8, M = 32 zbv < v-half < v-min in bubble
// and the reverse in peak memory.
func TestVShapeTradeOff(t *testing.T) {
	var res []zbtResult
	for _, name := range []string{"zbv", "v-half", "v-min"} {
		prog := zbtBuild(t, name, 8, 2, 32, ir.Options{})
		res = append(res, zbtSim(t, prog, zbtAllStages(prog)))
	}
	for i := 1; i < len(res); i++ {
		if res[i].makespan <= res[i-1].makespan || res[i].maxPeak >= res[i-1].maxPeak {
			t.Errorf("P=8 M=32: (makespan, peak) %v then %v; want more time for less memory",
				[2]int{res[i-1].makespan, res[i-1].maxPeak}, [2]int{res[i].makespan, res[i].maxPeak})
		}
	}
}
