package gen

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/sim"
)

// TestMPipeOwnersGrid: both ownership modes lower and verify (Lower
// verifies) over a grid of P, V and M; in the full mode every rank but the
// first stage's loads exactly its owned inputs, micro m on rank m mod
// min(P, M), and the first stage's rank loads only its own. The full mode
// refuses M < P, where a rank would own nothing.
func TestMPipeOwnersGrid(t *testing.T) {
	for _, mode := range []string{passes.OwnersMin, passes.OwnersFull} {
		for P := 1; P <= 5; P++ {
			for _, V := range []int{1, 2, 3} {
				for _, M := range []int{1, P, 2*P + 1, 4 * P} {
					cfg := ir.Config{Schedule: "mpipe", Ranks: P, Virtual: V, Micro: M}
					res, err := Lower(cfg, Options{Passes: passes.Options{MpipeOwners: mode}})
					if mode == passes.OwnersFull && M < P {
						if err == nil || !strings.Contains(err.Error(), "would own no micro-batch") {
							t.Errorf("%s P=%d V=%d M=%d: err = %v, want the refusal of a rank that owns nothing", mode, P, V, M, err)
						}
						continue
					}
					if err != nil {
						t.Errorf("%s P=%d V=%d M=%d: %v", mode, P, V, M, err)
						continue
					}
					p := res.Program
					owned := min(P, M)
					if mode == passes.OwnersFull {
						owned = M
					}
					for r, steps := range p.Ranks {
						for _, st := range steps {
							if st.Kind != ir.DataLoad || st.Stage != 0 {
								continue
							}
							want := p.Placement.Rank(0)
							if st.Micro < owned {
								want = st.Micro % P
							}
							if r != want {
								t.Errorf("%s P=%d V=%d M=%d: rank %d loads %s, want rank %d", mode, P, V, M, r, st, want)
							}
						}
					}
				}
			}
		}
	}
}

// TestMPipeRefusesSwap: mpipe with -swap is refused with the reason.
func TestMPipeRefusesSwap(t *testing.T) {
	_, err := Lower(ir.Config{Schedule: "mpipe", Ranks: 4, Micro: 8}, Options{Passes: passes.Options{Swap: 2}})
	if err == nil || !strings.Contains(err.Error(), "with -swap") {
		t.Errorf("err = %v, want the swap refusal", err)
	}
}

// TestMPipePreprocessFigure is docs/mpipe.md's figure: at P = 8, M = 32
// (V = 2) with a preprocess forward of 0.5·F on stage 0 (pre = 0.25 when a
// rank's share costs F = 1), mpipe's simulated iteration is below
// interleaved's in both ownership modes, the full one the lowest.
func TestMPipePreprocessFigure(t *testing.T) {
	c, err := sim.ParseCost("F=0.5,B=1,W=0.5,pre=0.25", 0)
	if err != nil {
		t.Fatal(err)
	}
	run := func(schedule, mode string) float64 {
		t.Helper()
		res, err := Lower(ir.Config{Schedule: schedule, Ranks: 8, Virtual: 2, Micro: 32}, Options{Passes: passes.Options{MpipeOwners: mode}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := sim.Run(res.Program, c)
		if err != nil {
			t.Fatal(err)
		}
		return r.Makespan
	}
	inter, mmin, mfull := run("interleaved", ""), run("mpipe", passes.OwnersMin), run("mpipe", passes.OwnersFull)
	t.Logf("interleaved %.2f, mpipe min %.2f, mpipe full %.2f", inter, mmin, mfull)
	if !(mfull < mmin && mmin < inter) {
		t.Errorf("interleaved %.2f, mpipe min %.2f, full %.2f: want full < min < interleaved", inter, mmin, mfull)
	}
	if want := 111.5; inter != want || mfull != 107 {
		t.Errorf("interleaved %.2f (want %.2f), mpipe full %.2f (want 107): docs/mpipe.md states these", inter, want, mfull)
	}
}
