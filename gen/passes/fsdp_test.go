package passes

import (
	"fmt"
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
			out, err := FSDP(lowered, FSDPOptions{Window: window})
			if err != nil {
				if window == 1 && strings.Contains(err.Error(), "raise the window") {
					continue // an overlap of two stages
				}
				t.Fatalf("%s window %d: %v", tc.Name, window, err)
			}
			checkFSDP(t, tc.Name, lowered, out, window)
		}
	}
	if _, err := FSDP(ir.Program{}, FSDPOptions{Window: 0}); err == nil || !strings.Contains(err.Error(), "window 0") {
		t.Errorf("window 0: %v", err)
	}
}

// TestFSDPPrefetchPlacement: where FSDP puts each UNSHARD on rank 0 of
// small programs, for windows and prefetch distances side by side.
func TestFSDPPrefetchPlacement(t *testing.T) {
	// Stages 0, 2 and 4 on rank 0 (P=2, V=3): with window 2, FSDP reshards
	// 0 for 4 and unshards it again for 0B0.
	const v3 = "rank 0: 0F0 2F0 4F0 4B0 2B0 0B0\nrank 1: 1F0 3F0 5F0 5B0 3B0 1B0"
	const data = "rank 0: 0DATA_LOAD0 0F0 0DATA_LOAD1 0F1 2F0 2F1 2B0 2B1 0B0 0B1\nrank 1: 1F0 1F1 3F0 3F1 3B0 3B1 1B0 1B1"
	tests := []struct {
		name             string
		text             string
		window, prefetch int
		want             string
	}{
		{"prefetch 0 is FSDP's placement", v3, 2, 0,
			"0UNSHARD 0F0 2UNSHARD 2F0 0RESHARD 4UNSHARD 4F0 4B0 4REDUCE_GRAD 4RESHARD 2B0 2REDUCE_GRAD 2RESHARD 0UNSHARD 0B0 0REDUCE_GRAD 0RESHARD"},
		// 2UNSHARD one compute step early; 4UNSHARD stays below the
		// 0RESHARD that frees its place; the second 0UNSHARD goes right
		// after the 4RESHARD that frees one.
		{"one step ahead", v3, 2, 1,
			"0UNSHARD 2UNSHARD 0F0 2F0 0RESHARD 4UNSHARD 4F0 4B0 4REDUCE_GRAD 4RESHARD 0UNSHARD 2B0 2REDUCE_GRAD 2RESHARD 0B0 0REDUCE_GRAD 0RESHARD"},
		// Two steps ahead would put the second 0UNSHARD above 4B0, where
		// 2 and 4 fill the window: it stops below 4RESHARD.
		{"not above the freeing RESHARD", v3, 2, 2,
			"0UNSHARD 2UNSHARD 0F0 2F0 0RESHARD 4UNSHARD 4F0 4B0 4REDUCE_GRAD 4RESHARD 0UNSHARD 2B0 2REDUCE_GRAD 2RESHARD 0B0 0REDUCE_GRAD 0RESHARD"},
		{"window 3, one step ahead", v3, 3, 1,
			"0UNSHARD 2UNSHARD 0F0 4UNSHARD 2F0 4F0 4B0 4REDUCE_GRAD 4RESHARD 2B0 2REDUCE_GRAD 2RESHARD 0B0 0REDUCE_GRAD 0RESHARD"},
		{"window 3, two steps ahead", v3, 3, 2,
			"0UNSHARD 2UNSHARD 4UNSHARD 0F0 2F0 4F0 4B0 4REDUCE_GRAD 4RESHARD 2B0 2REDUCE_GRAD 2RESHARD 0B0 0REDUCE_GRAD 0RESHARD"},
		// Window 1: every place is freed right below the UNSHARD.
		{"window 1 leaves no room", v3, 1, 2,
			"0UNSHARD 0F0 0RESHARD 2UNSHARD 2F0 2RESHARD 4UNSHARD 4F0 4B0 4REDUCE_GRAD 4RESHARD 2UNSHARD 2B0 2REDUCE_GRAD 2RESHARD 0UNSHARD 0B0 0REDUCE_GRAD 0RESHARD"},
		// Right before the compute step K above; to the start of the
		// steps when fewer come before (over the data loads).
		{"over other steps", data, 2, 1,
			"0UNSHARD 0DATA_LOAD0 0F0 0DATA_LOAD1 2UNSHARD 0F1 2F0 2F1 2B0 2B1 2REDUCE_GRAD 2RESHARD 0B0 0B1 0REDUCE_GRAD 0RESHARD"},
		{"to the start", data, 2, 3,
			"0UNSHARD 2UNSHARD 0DATA_LOAD0 0F0 0DATA_LOAD1 0F1 2F0 2F1 2B0 2B1 2REDUCE_GRAD 2RESHARD 0B0 0B1 0REDUCE_GRAD 0RESHARD"},
	}
	for _, tt := range tests {
		p, err := ir.ParseText(tt.text)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		out, err := FSDP(p, FSDPOptions{Window: tt.window, Prefetch: tt.prefetch})
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		got := strings.TrimPrefix(strings.TrimSpace(ir.FormatText(ir.Program{Ranks: out.Ranks[:1]})), "rank 0: ")
		if got != tt.want {
			t.Errorf("%s (window %d, prefetch %d):\n got %s\nwant %s", tt.name, tt.window, tt.prefetch, got, tt.want)
		}
		checkFSDP(t, tt.name, p, out, tt.window)
	}
	if _, err := FSDP(ir.Program{}, FSDPOptions{Window: 1, Prefetch: -1}); err == nil || !strings.Contains(err.Error(), "prefetch -1") {
		t.Errorf("prefetch -1: %v", err)
	}
}

// TestFSDPPrefetchInvariants: on the programs of TestFSDPInvariants, for
// windows 1 to 3 and prefetch 0 to 3, FSDP with prefetch keeps its promises
// (checkFSDP), prefetch 0 is FSDP's output, and a larger prefetch moves
// only UNSHARDs: each ahead of its use by at most prefetch compute steps,
// and by fewer only where it could not move further: at the start of the
// steps, or right below a RESHARD (other UNSHARDs between) above which the
// window is full.
func TestFSDPPrefetchInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	programs := map[string]ir.Program{
		"1f1b P=4 M=8":            testprog.OneF1B(4, 8),
		"interleaved P=2 V=3 M=6": testprog.Interleaved(2, 3, 6),
		"interleaved P=3 V=4 M=6": testprog.Interleaved(3, 4, 6),
		"v P=3 M=6 split":         testprog.VShape(3, 6, true),
		"overlaps":                testprog.FuseRandom(rng, testprog.Interleaved(2, 3, 6)),
	}
	drop := func(steps []ir.Step) string {
		var b strings.Builder
		for _, st := range steps {
			if st.Kind != ir.Unshard {
				b.WriteString(st.String() + " ")
			}
		}
		return b.String()
	}
	moved := 0
	for name, prog := range programs {
		lowered, err := InsertComm(prog, CommOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for window := 1; window <= 3; window++ {
			base, err := FSDP(lowered, FSDPOptions{Window: window})
			if err != nil {
				continue // an overlap of two stages at window 1
			}
			for k := 0; k <= 3; k++ {
				tag := fmt.Sprintf("%s window %d prefetch %d", name, window, k)
				out, err := FSDP(lowered, FSDPOptions{Window: window, Prefetch: k})
				if err != nil {
					t.Fatalf("%s: %v", tag, err)
				}
				checkFSDP(t, tag, lowered, out, window)
				if k == 0 && ir.FormatText(out) != ir.FormatText(base) {
					t.Fatalf("%s: differs from FSDP's output", tag)
				}
				for r, steps := range out.Ranks {
					if drop(steps) != drop(base.Ranks[r]) {
						t.Fatalf("%s rank %d: steps other than UNSHARD moved", tag, r)
					}
					moved += checkPrefetch(t, fmt.Sprintf("%s rank %d", tag, r), steps, window, k)
				}
			}
		}
	}
	if moved == 0 {
		t.Error("no UNSHARD moved ahead of its use")
	}
}

// checkPrefetch checks where each UNSHARD of one rank sits (see
// TestFSDPPrefetchInvariants) and returns how many are ahead of their use.
func checkPrefetch(t *testing.T, name string, steps []ir.Step, window, k int) int {
	t.Helper()
	moved := 0
	active := map[int]bool{}
	before := make([]int, len(steps)) // stages unsharded just before each step
	for i, st := range steps {
		before[i] = len(active)
		switch st.Kind {
		case ir.Unshard:
			active[st.Stage] = true
		case ir.Reshard:
			delete(active, st.Stage)
		}
	}
	for i, st := range steps {
		if st.Kind != ir.Unshard {
			continue
		}
		ahead := 0 // compute steps between the UNSHARD and its stage's next
	next:
		for _, nx := range steps[i+1:] {
			for _, c := range nx.Computes() {
				if c.Stage == st.Stage {
					break next
				}
			}
			if nx.Kind.IsCompute() {
				ahead++
			}
		}
		if ahead > k {
			t.Fatalf("%s: step %d %s is %d compute steps ahead of its use, prefetch %d", name, i, st, ahead, k)
		}
		if ahead > 0 {
			moved++
		}
		if ahead == k {
			if j := i + 1; k > 0 {
				for j < len(steps) && steps[j].Kind == ir.Unshard {
					j++
				}
				if j == len(steps) || !steps[j].Kind.IsCompute() {
					t.Fatalf("%s: step %d %s is %d compute steps ahead of its use but not right before a compute step", name, i, st, k)
				}
			}
			continue
		}
		j := i - 1
		for j >= 0 && steps[j].Kind == ir.Unshard {
			j--
		}
		if j >= 0 && (steps[j].Kind != ir.Reshard || (steps[j].Stage != st.Stage && before[j] < window)) {
			t.Fatalf("%s: step %d %s is %d compute steps ahead of its use (prefetch %d) but could move above step %d %s", name, i, st, ahead, k, j, steps[j])
		}
	}
	return moved
}
