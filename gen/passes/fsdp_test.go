package passes

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/internal/testprog"
	"github.com/ppgen/ppgen/gen/ir"
)

// checkFSDP checks, independently of the pass, what FSDP promises on every
// rank: each compute step's stages are unsharded (an UNSHARD since the last
// RESHARD), never more than window at once, UNSHARD and RESHARD alternate
// and end resharded, one REDUCE_GRAD per stage right after its last B or W,
// and the other steps kept in order.
func checkFSDP(t *testing.T, name string, in, out ir.Program, window int) {
	t.Helper()
	for r := range out.Ranks {
		active := map[int]bool{}
		reduced := map[int]bool{}
		lastGrad := map[int]int{}
		var kept []ir.Step
		for i, st := range out.Ranks[r] {
			switch st.Kind {
			case ir.Unshard:
				if active[st.Stage] {
					t.Fatalf("%s rank %d step %d: UNSHARD %d while unsharded", name, r, i, st.Stage)
				}
				active[st.Stage] = true
				if len(active) > window {
					t.Fatalf("%s rank %d step %d: %d stages unsharded, window %d", name, r, i, len(active), window)
				}
			case ir.Reshard:
				if !active[st.Stage] {
					t.Fatalf("%s rank %d step %d: RESHARD %d while sharded", name, r, i, st.Stage)
				}
				delete(active, st.Stage)
			case ir.ReduceGrad:
				if reduced[st.Stage] {
					t.Fatalf("%s rank %d step %d: second REDUCE_GRAD %d", name, r, i, st.Stage)
				}
				reduced[st.Stage] = true
				if lastGrad[st.Stage] != i-1 {
					t.Fatalf("%s rank %d step %d: REDUCE_GRAD %d not right after its last B or W (step %d)", name, r, i, st.Stage, lastGrad[st.Stage])
				}
			default:
				kept = append(kept, st)
				for _, c := range st.Computes() {
					if !active[c.Stage] {
						t.Fatalf("%s rank %d step %d (%s): stage %d is sharded", name, r, i, st, c.Stage)
					}
					if reduced[c.Stage] {
						t.Fatalf("%s rank %d step %d (%s): stage %d computes after its REDUCE_GRAD", name, r, i, st, c.Stage)
					}
					if c.Kind == ir.Backward || c.Kind == ir.BackwardWeight {
						lastGrad[c.Stage] = i
					}
				}
			}
		}
		if len(active) != 0 {
			t.Fatalf("%s rank %d: stages %v unsharded at the end", name, r, active)
		}
		for s := range lastGrad {
			if !reduced[s] {
				t.Fatalf("%s rank %d: stage %d has no REDUCE_GRAD", name, r, s)
			}
		}
		if len(kept) != len(in.Ranks[r]) {
			t.Fatalf("%s rank %d: %d steps kept of %d", name, r, len(kept), len(in.Ranks[r]))
		}
		for i := range kept {
			if kept[i].String() != in.Ranks[r][i].String() {
				t.Fatalf("%s rank %d: step %d is %s, was %s", name, r, i, kept[i], in.Ranks[r][i])
			}
		}
	}
}

func TestFSDPInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		Name    string
		Program ir.Program
	}{
		{"1f1b P=4 M=8", testprog.OneF1B(4, 8)},
		{"gpipe P=3 M=5", testprog.GPipe(3, 5)},
		{"interleaved P=2 V=3 M=6", testprog.Interleaved(2, 3, 6)},
		{"v P=3 M=6 split", testprog.VShape(3, 6, true)},
		{"zb P=4 M=8", testprog.ZBLike(4, 8)},
		{"overlaps", testprog.FuseRandom(rng, testprog.Interleaved(2, 2, 6))},
	}
	for _, tc := range cases {
		lowered, err := InsertComm(tc.Program, CommOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.Name, err)
		}
		for _, window := range []int{1, 2, 3} {
			out, err := FSDP(lowered, window)
			if err != nil {
				if window == 1 && strings.Contains(err.Error(), "raise the window") {
					continue // an overlap of two stages
				}
				t.Fatalf("%s window %d: %v", tc.Name, window, err)
			}
			checkFSDP(t, tc.Name, lowered, out, window)
		}
	}
	if _, err := FSDP(ir.Program{}, 0); err == nil || !strings.Contains(err.Error(), "window 0") {
		t.Errorf("window 0: %v", err)
	}
}
