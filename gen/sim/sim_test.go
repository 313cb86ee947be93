package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

const tol = 1e-12

func near(a, b float64) bool { return math.Abs(a-b) <= tol }

func mustRun(t testing.TB, p ir.Program, c Cost) Result {
	t.Helper()
	r, err := Run(p, c)
	if err != nil {
		t.Fatalf("Run: %v\nprogram:\n%s", err, ir.FormatText(p))
	}
	return r
}

// TestBubbleFormula checks the exact whole-iteration bubble (P−1)/(M+P−1)
// and makespan 3(M+P−1) of GPipe and 1F1B at F=1, B=2, comm=0, compute-only
// and lowered.
func TestBubbleFormula(t *testing.T) {
	c := uniformCost(1, 2, 1, 0)
	for _, P := range []int{1, 2, 3, 4, 8} {
		for _, M := range []int{1, 2, 3, 4, 7, 8, 16} {
			progs := map[string]ir.Program{
				"gpipe":            gpipe(P, M),
				"gpipe/naive-comm": naiveComm(gpipe(P, M)),
				"1f1b":             onef1b(P, M, false),
				"1f1b/hoisted":     hoist(t, naiveComm(onef1b(P, M, false)), c),
				"1f1b/closed-form": onef1bComm(P, M),
			}
			for _, name := range []string{"gpipe", "gpipe/naive-comm", "1f1b", "1f1b/hoisted", "1f1b/closed-form"} {
				t.Run(fmt.Sprintf("%s/P=%d/M=%d", name, P, M), func(t *testing.T) {
					r := mustRun(t, progs[name], c)
					wantBubble := float64(P-1) / float64(M+P-1)
					if !near(r.Bubble, wantBubble) {
						t.Errorf("bubble = %.15g, want (P-1)/(M+P-1) = %.15g", r.Bubble, wantBubble)
					}
					if want := float64(3 * (M + P - 1)); !near(r.Makespan, want) {
						t.Errorf("makespan = %g, want 3(M+P-1) = %g", r.Makespan, want)
					}
					for rank, b := range r.Busy {
						if !near(b, float64(3*M)) {
							t.Errorf("busy[%d] = %g, want %d", rank, b, 3*M)
						}
					}
				})
			}
		}
	}
}

func TestNaive1F1BDeadlocks(t *testing.T) {
	_, err := Run(naiveComm(onef1b(4, 8, false)), DefaultCost())
	var de *DeadlockError
	if !errors.As(err, &de) || !errors.Is(err, ErrStuck) {
		t.Fatalf("naive 1F1B under rendezvous: err = %v, want a *DeadlockError", err)
	}
}

// TestClosedFormMatchesHoist: the benchmark's closed-form lowering of 1F1B
// times exactly like the generic hoisting repair.
func TestClosedFormMatchesHoist(t *testing.T) {
	c := uniformCost(1, 2, 1, 0.25)
	for _, P := range []int{2, 3, 4, 5} {
		for _, M := range []int{1, 2, 5, 8} {
			h := hoist(t, naiveComm(onef1b(P, M, false)), DefaultCost())
			if got, want := ir.FormatText(onef1bComm(P, M)), ir.FormatText(h); got != want {
				t.Errorf("P=%d M=%d: closed form\n%s\nhoisted\n%s", P, M, got, want)
			}
			a := mustRun(t, h, c)
			b := mustRun(t, onef1bComm(P, M), c)
			if a.Makespan != b.Makespan || !reflect.DeepEqual(a.Busy, b.Busy) || !reflect.DeepEqual(a.PeakActivations, b.PeakActivations) {
				t.Errorf("P=%d M=%d: hoisted %v vs closed form %v", P, M, a.Summary(), b.Summary())
			}
		}
	}
}

func TestPeakActivations(t *testing.T) {
	c := DefaultCost()
	P, M := 4, 8
	g := mustRun(t, naiveComm(gpipe(P, M)), c)
	o := mustRun(t, onef1bComm(P, M), c)
	for r := 0; r < P; r++ {
		if g.PeakActivations[r] != M {
			t.Errorf("gpipe rank %d peak = %d, want M = %d", r, g.PeakActivations[r], M)
		}
		if want := P - r; o.PeakActivations[r] != want {
			t.Errorf("1f1b rank %d peak = %d, want P-r = %d", r, o.PeakActivations[r], want)
		}
	}
	if o.Peak() != P {
		t.Errorf("1f1b Peak() = %d, want %d", o.Peak(), P)
	}
	// M < P: every chunk fits.
	o = mustRun(t, onef1b(8, 2, false), c)
	if o.Peak() != 2 {
		t.Errorf("1f1b P=8 M=2 peak = %d, want 2", o.Peak())
	}
}

// TestHandTimed checks every event of small programs against hand-computed times.
func TestHandTimed(t *testing.T) {
	type want struct {
		rank  int
		step  string
		start float64
		end   float64
	}
	tests := []struct {
		name     string
		prog     string
		cost     string
		makespan float64
		want     []want
	}{
		{
			// Rank 1's RECV_F0 is posted at 0 and waits for the send (posted at 1).
			// Rank 0's RECV_B0 is posted at 1 but queued behind SEND_F0 (done 1.5).
			name:     "gpipe P=2 M=1 comm=0.5",
			prog:     "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n",
			cost:     "comm=0.5",
			makespan: 7,
			want: []want{
				{0, "0F0", 0, 1}, {0, "0SEND_F0", 1, 1.5}, {0, "0RECV_B0", 4.5, 5}, {0, "0B0", 5, 7},
				{1, "1RECV_F0", 1, 1.5}, {1, "1F0", 1.5, 2.5}, {1, "1B0", 2.5, 4.5}, {1, "1SEND_B0", 4.5, 5},
			},
		},
		{
			name:     "compute-only P=2 M=1 comm=0.5",
			prog:     "rank 0: 0F0 0B0\nrank 1: 1F0 1B0\n",
			cost:     "comm=0.5",
			makespan: 7,
			want:     []want{{0, "0F0", 0, 1}, {1, "1F0", 1.5, 2.5}, {1, "1B0", 2.5, 4.5}, {0, "0B0", 5, 7}},
		},
		{
			name:     "overlap takes the max",
			prog:     "rank 0: 0F0 (0F1;0B0)OVERLAP_F_B 0B1\n",
			makespan: 5,
			want:     []want{{0, "0F0", 0, 1}, {0, "(0F1;0B0)OVERLAP_F_B", 1, 3}, {0, "0B1", 3, 5}},
		},
		{
			name:     "overlap factor",
			prog:     "rank 0: 0F0 (0F1;0B0)OVERLAP_F_B 0B1\n",
			cost:     "overlap=0.5",
			makespan: 5.5,
			want:     []want{{0, "(0F1;0B0)OVERLAP_F_B", 1, 3.5}},
		},
		{
			name:     "split backward default I=B-W",
			prog:     "rank 0: 0F0 0F1 0I0 0W0 0I1 0W1\n",
			cost:     "F=1,B=3,W=1",
			makespan: 8,
			want:     []want{{0, "0I0", 2, 4}, {0, "0W0", 4, 5}, {0, "0I1", 5, 7}, {0, "0W1", 7, 8}},
		},
		{
			name:     "only B given: W keeps its default 1, I=B-W",
			prog:     "rank 0: 0F0 0I0 0W0\n",
			cost:     "B=3",
			makespan: 4,
			want:     []want{{0, "0I0", 1, 3}, {0, "0W0", 3, 4}},
		},
		{
			name:     "only I given: B = I + W, so B and I then W cost the same",
			prog:     "rank 0: 0F0 0B0 0F1 0I1 0W1\n",
			cost:     "I=5",
			makespan: 14,
			want:     []want{{0, "0B0", 1, 7}, {0, "0F1", 7, 8}, {0, "0I1", 8, 13}, {0, "0W1", 13, 14}},
		},
		{
			// Rank 1's host posts RECV_F0 and goes on to its DATA_LOAD at once.
			name:     "per-stage costs and data loads",
			prog:     "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0\n",
			cost:     "F=1:2,B=2:4,data=0.5",
			makespan: 9.5,
			want:     []want{{0, "0DATA_LOAD0", 0, 0.5}, {0, "0F0", 0.5, 1.5}, {1, "1DATA_LOAD0", 0, 0.5}, {0, "0SEND_F0", 1.5, 1.5}, {1, "1F0", 1.5, 3.5}, {1, "1B0", 3.5, 7.5}, {0, "0B0", 7.5, 9.5}},
		},
		{
			// The last stage's F waits for its labels (DATA_RECV) too.
			name:     "labels shipped after the activation",
			prog:     "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_SEND0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1DATA_RECV0 1F0 1B0 1SEND_B0\n",
			cost:     "comm=0.5",
			makespan: 7.5,
			want: []want{
				{0, "0SEND_F0", 1, 1.5}, {1, "1RECV_F0", 1, 1.5}, {0, "0DATA_SEND0", 1.5, 2}, {1, "1DATA_RECV0", 1.5, 2},
				{1, "1F0", 2, 3}, {1, "1B0", 3, 5}, {0, "0RECV_B0", 5, 5.5}, {0, "0B0", 5.5, 7.5},
			},
		},
		{
			name:     "v placement: the turn is local",
			prog:     "rank 0: 0F0 0SEND_F0 3RECV_F0 3F0 3B0 3SEND_B0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2B0 1B0 1SEND_B0\n",
			makespan: 12,
			want:     []want{{1, "2F0", 2, 3}, {0, "3F0", 3, 4}, {1, "2B0", 6, 8}, {1, "1B0", 8, 10}, {0, "0B0", 10, 12}},
		},
		{
			name:     "swap: wait blocks until the launch ends",
			prog:     "rank 0: 0F0 0SWAP_LAUNCH_OFFLOAD0 0F1 0SWAP_WAIT_OFFLOAD0 0SWAP_LAUNCH_LOAD0 0B1 0SWAP_WAIT_LOAD0 0B0\n",
			cost:     "swap=3",
			makespan: 9,
			want: []want{
				{0, "0SWAP_LAUNCH_OFFLOAD0", 1, 4}, {0, "0SWAP_WAIT_OFFLOAD0", 2, 4},
				{0, "0SWAP_LAUNCH_LOAD0", 4, 7}, {0, "0B1", 4, 6}, {0, "0SWAP_WAIT_LOAD0", 6, 7}, {0, "0B0", 7, 9},
			},
		},
		{
			// UNSHARD runs on the FSDP stream from when the host reaches it;
			// the compute on its stage waits for it; REDUCE_GRAD blocks the host.
			name:     "fsdp: all-gathers on their own stream",
			prog:     "rank 0: 0UNSHARD 0F0 1UNSHARD 1F0 1B0 1REDUCE_GRAD 1RESHARD 0B0 0REDUCE_GRAD 0RESHARD OPT_STEP\n",
			cost:     "unshard=0.5,reduce=0.25",
			makespan: 7.5,
			want: []want{
				{0, "0UNSHARD", 0, 0.5}, {0, "0F0", 0.5, 1.5}, {0, "1UNSHARD", 1.5, 2}, {0, "1F0", 2, 3},
				{0, "1REDUCE_GRAD", 5, 5.25}, {0, "0B0", 5.25, 7.25}, {0, "OPT_STEP", 7.5, 7.5},
			},
		},
		{
			// Issued a compute step ahead, the second all-gather queues
			// behind the first on the stream and hides behind 0F0.
			name:     "fsdp: a prefetched all-gather hides",
			prog:     "rank 0: 0UNSHARD 1UNSHARD 0F0 1F0 1B0 1REDUCE_GRAD 1RESHARD 0B0 0REDUCE_GRAD 0RESHARD OPT_STEP\n",
			cost:     "unshard=0.5,reduce=0.25",
			makespan: 7,
			want:     []want{{0, "0UNSHARD", 0, 0.5}, {0, "1UNSHARD", 0.5, 1}, {0, "0F0", 0.5, 1.5}, {0, "1F0", 1.5, 2.5}},
		},
		{
			// 0B0 waits for the second 0UNSHARD, not the first.
			name:     "fsdp: the latest UNSHARD counts",
			prog:     "rank 0: 0UNSHARD 0F0 0RESHARD 1UNSHARD 1F0 1B0 1REDUCE_GRAD 1RESHARD 0UNSHARD 0B0 0REDUCE_GRAD 0RESHARD\n",
			cost:     "unshard=1",
			makespan: 9,
			want:     []want{{0, "1UNSHARD", 2, 3}, {0, "1F0", 3, 4}, {0, "0B0", 7, 9}},
		},
		{
			name:     "fsdp: an overlap waits for both stages",
			prog:     "rank 0: 0UNSHARD 0F0 1UNSHARD (1F0;0F1)OVERLAP_F_B 1B0 1F1 1B1 0B0 0B1\n",
			cost:     "unshard=2",
			makespan: 15,
			want:     []want{{0, "0F0", 2, 3}, {0, "1UNSHARD", 3, 5}, {0, "(1F0;0F1)OVERLAP_F_B", 5, 6}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ir.ParseText(tt.prog)
			if err != nil {
				t.Fatal(err)
			}
			c, err := ParseCost(tt.cost, p.Stages())
			if err != nil {
				t.Fatal(err)
			}
			r := mustRun(t, p, c)
			if !near(r.Makespan, tt.makespan) {
				t.Errorf("makespan = %g, want %g", r.Makespan, tt.makespan)
			}
			for _, w := range tt.want {
				found := false
				for _, ev := range r.Events {
					if ev.Rank == w.rank && ev.Step.String() == w.step {
						found = true
						if !near(ev.Start, w.start) || !near(ev.End, w.end) {
							t.Errorf("rank %d %s: [%g, %g], want [%g, %g]", w.rank, w.step, ev.Start, ev.End, w.start, w.end)
						}
					}
				}
				if !found {
					t.Errorf("no event %s on rank %d", w.step, w.rank)
				}
			}
		})
	}
}

func TestSwapExcludedFromPeak(t *testing.T) {
	p, err := ir.ParseText("rank 0: 0F0 0SWAP_LAUNCH_OFFLOAD0 0SWAP_WAIT_OFFLOAD0 0F1 0F2 0B2 0SWAP_LAUNCH_LOAD0 0B1 0SWAP_WAIT_LOAD0 0B0\n")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ParseCost("swap=0.5", 1)
	r := mustRun(t, p, c)
	if r.PeakActivations[0] != 2 {
		t.Errorf("peak = %d, want 2 (micro 0 swapped out while 1 and 2 are live)", r.PeakActivations[0])
	}
}

func TestCompareComputeOnlyAndLowered(t *testing.T) {
	// At comm=0 the naive GPipe lowering times exactly like its compute-only order.
	for _, comm := range []float64{0} {
		c := uniformCost(1, 2, 1, comm)
		a := mustRun(t, gpipe(4, 6), c)
		b := mustRun(t, naiveComm(gpipe(4, 6)), c)
		if a.Makespan != b.Makespan || !reflect.DeepEqual(a.PeakActivations, b.PeakActivations) {
			t.Errorf("comm=%g: compute-only %+v vs lowered %+v", comm, a.Summary(), b.Summary())
		}
	}
	// With latency c per hop the compute-only GPipe takes 3(M+P−1) + 2c(P−1).
	P, M, comm := 4, 6, 0.25
	r := mustRun(t, gpipe(P, M), uniformCost(1, 2, 1, comm))
	if want := float64(3*(M+P-1)) + 2*comm*float64(P-1); !near(r.Makespan, want) {
		t.Errorf("compute-only gpipe with latency: makespan %g, want %g", r.Makespan, want)
	}
}

func TestBubbleSpan(t *testing.T) {
	P, M := 4, 8
	r := mustRun(t, onef1b(P, M, false), DefaultCost())
	var busy, span float64
	for rank := 0; rank < P; rank++ {
		var first, last float64 = math.Inf(1), 0
		for _, ev := range r.Events {
			if ev.Rank == rank && ev.Step.Kind.IsCompute() {
				first = min(first, ev.Start)
				last = max(last, ev.End)
			}
		}
		if !near(r.Span[rank], last-first) {
			t.Errorf("span[%d] = %g, want %g", rank, r.Span[rank], last-first)
		}
		busy += r.Busy[rank]
		span += last - first
	}
	if !near(r.BubbleSpan, (span-busy)/span) {
		t.Errorf("bubble span = %g, want %g", r.BubbleSpan, (span-busy)/span)
	}
	if r.BubbleSpan >= r.Bubble {
		t.Errorf("stage-span bubble %g should be below the whole-iteration bubble %g", r.BubbleSpan, r.Bubble)
	}
	// The last rank runs F B F B ... without a gap.
	if !near(r.Span[P-1], float64(3*M)) {
		t.Errorf("span[last] = %g, want 3M = %d", r.Span[P-1], 3*M)
	}
}

func TestDeadlocks(t *testing.T) {
	tests := []struct {
		name  string
		prog  string
		ranks []int
		want  []string // substrings of the error
	}{
		{
			name:  "crossed sends",
			prog:  "rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
			ranks: []int{0, 1},
			want:  []string{"rank 0:", "rank 1:", "0SEND_F1", "1SEND_B0", "queued behind"},
		},
		{
			name:  "receive after its consumer",
			prog:  "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1F0 1RECV_F0 1B0 1SEND_B0\n",
			ranks: []int{0, 1},
			want:  []string{"host blocked at step 0 1F0, waits for 1RECV_F0 (rank 1 step 1), not complete", "not posted yet"},
		},
		{
			name:  "labels and activations in crossed order",
			prog:  "rank 0: 0F0 0SEND_F0 0DATA_SEND0 0RECV_B0 0B0\nrank 1: 1DATA_RECV0 1RECV_F0 1F0 1B0 1SEND_B0\n",
			ranks: []int{0, 1},
			want:  []string{"comm head step 1 0SEND_F0 waits for its partner 1RECV_F0 (rank 1 step 1), which is queued behind rank 1's comm head step 0 1DATA_RECV0"},
		},
		{
			name:  "compute-only cycle",
			prog:  "rank 0: 0F0 0B0\nrank 1: 1B0 1F0\n",
			ranks: []int{0, 1},
			want:  []string{"1B0, waits for 1F0 (rank 1 step 1), not run yet"},
		},
		{
			name:  "swap wait without launch",
			prog:  "rank 0: 0F0 0SWAP_WAIT_LOAD0 0B0\n",
			ranks: []int{0},
			want:  []string{"no earlier step of rank 0 starts"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ir.ParseText(tt.prog)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Run(p, DefaultCost())
			var de *DeadlockError
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want a *DeadlockError", err)
			}
			if !errors.Is(err, ErrStuck) {
				t.Errorf("error does not wrap ErrStuck")
			}
			var got []int
			for _, s := range de.Stuck {
				got = append(got, s.Rank)
			}
			if !reflect.DeepEqual(got, tt.ranks) {
				t.Errorf("stuck ranks = %v, want %v", got, tt.ranks)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestCrossedSendsDetail(t *testing.T) {
	p, _ := ir.ParseText("rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n")
	_, err := Run(p, DefaultCost())
	var de *DeadlockError
	if !errors.As(err, &de) {
		t.Fatal(err)
	}
	s0 := de.Stuck[0]
	if s0.Comm != 3 || s0.PeerRank != 1 || s0.PeerIndex != 4 || s0.Host != 5 {
		t.Errorf("rank 0 stuck = %+v; want comm head 3 (0SEND_F1) matched to rank 1 step 4, host at 5 (0B0)", s0)
	}
}

func TestRunErrors(t *testing.T) {
	parse := func(s string) ir.Program {
		p, err := ir.ParseText(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	noPeer := ir.NewProgram(ir.Loop(2, 1), 1)
	noPeer.Ranks[0] = []ir.Step{ir.Compute(ir.Forward, 0, 0), ir.Comm(ir.SendF, 0, 0, 7)}
	noPeer.Placement.RankOf = nil
	badSub := ir.NewProgram(ir.Loop(1, 1), 1)
	badSub.Ranks[0] = []ir.Step{ir.Overlap(ir.OverlapFB, ir.Compute(ir.Forward, 0, 0), ir.Comm(ir.SendF, 0, 0, 0))}
	tests := []struct {
		name  string
		prog  ir.Program
		cost  Cost
		want  string
		stuck bool
	}{
		{"no ranks", ir.Program{}, Cost{}, "no ranks", false},
		{"unmatched send", parse("rank 0: 0F0 0SEND_F0 0B0\nrank 1: 1F0 1B0\n"), Cost{}, "rank 0 step 1 0SEND_F0: send has no matching partner on rank 1", true},
		{"missing producer", parse("rank 0: 0B0\nrank 1: 1F0 1B0\n"), Cost{}, "needs the forward F of stage 0 micro 0, which no rank runs", true},
		{"cost list length", parse("rank 0: 0F0 0B0\nrank 1: 1F0 1B0\n"), Cost{F: []float64{1, 2, 3}}, "F has 3 values; want 1 (every stage) or 2", false},
		{"negative cost", parse("rank 0: 0F0 0B0\n"), Cost{Comm: -1}, "comm is -1", false},
		{"no peer", noPeer, Cost{}, "no peer rank", false},
		{"bad overlap", badSub, Cost{}, "is not F, B, I or W", false},
		{"invalid kind", ir.Program{Ranks: [][]ir.Step{{{Kind: ir.Kind(200)}}}}, Cost{}, "invalid step kind", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(tt.prog, tt.cost)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			if errors.Is(err, ErrStuck) != tt.stuck {
				t.Errorf("errors.Is(err, ErrStuck) = %v, want %v", !tt.stuck, tt.stuck)
			}
		})
	}
}

func TestDeterministicAndPeers(t *testing.T) {
	p := onef1bComm(4, 8)
	a := mustRun(t, p, uniformCost(1, 2, 1, 0.1))
	b := mustRun(t, p, uniformCost(1, 2, 1, 0.1))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs differ")
	}
	if len(a.Events) != p.NumSteps() {
		t.Fatalf("%d events for %d steps", len(a.Events), p.NumSteps())
	}
	for r := range p.Ranks {
		for i, st := range p.Ranks[r] {
			ev := a.Events[a.Offsets[r]+i]
			if ev.Rank != r || ev.Index != i || !ev.Step.Equal(st) {
				t.Fatalf("Events[Offsets[%d]+%d] = %+v", r, i, ev)
			}
		}
	}
	for i, ev := range a.Events {
		if !ev.Step.Kind.IsComm() {
			if ev.Peer != -1 || ev.Lane != LaneCompute {
				t.Errorf("event %d %s: peer %d lane %v", i, ev.Step, ev.Peer, ev.Lane)
			}
			continue
		}
		pe := a.Events[ev.Peer]
		if pe.Peer != i || pe.Start != ev.Start || pe.End != ev.End || pe.Step.Kind.IsSend() == ev.Step.Kind.IsSend() {
			t.Errorf("event %d %s and its peer %d %s do not pair", i, ev.Step, ev.Peer, pe.Step)
		}
		if ev.Lane != LaneComm || ev.Posted > ev.Start || math.Abs(ev.End-ev.Start-0.1) > 1e-9 {
			t.Errorf("event %d %s: lane %v posted %g [%g, %g]", i, ev.Step, ev.Lane, ev.Posted, ev.Start, ev.End)
		}
	}
}

func TestSummaryJSON(t *testing.T) {
	r := mustRun(t, gpipe(2, 2), DefaultCost())
	r.LowerBound = 9 // what a caller sets (LowerBound: 1 + 6 + 2)
	// Indented as ppgen sim -json writes it.
	b, err := json.MarshalIndent(r.Summary(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	want := `{
  "makespan": 9,
  "bubble": 0.33333333333333337,
  "bubble_span": 0.2,
  "peak_activations": [
    2,
    2
  ],
  "busy": [
    6,
    6
  ],
  "lower_bound": 9
}
`
	if string(b) != want {
		t.Errorf("JSON =\n%s\nwant\n%s", b, want)
	}
}

// TestManyRanks exercises the watcher maps used beyond 4096 ranks.
func TestManyRanks(t *testing.T) {
	P, M := 5000, 2
	for _, p := range []ir.Program{gpipe(P, M), naiveComm(gpipe(P, M))} {
		r := mustRun(t, p, DefaultCost())
		if want := float64(3 * (M + P - 1)); !near(r.Makespan, want) {
			t.Errorf("makespan %g, want %g", r.Makespan, want)
		}
	}
}

// TestPeakActivationsZeroLength: steps of zero length still hold their
// chunks; at one instant the rank's steps go in program order, so all-zero
// costs count the live chunks of the program order itself (as gen/verify
// does), and a zero-length step next to positive ones keeps the half-open
// rule for the positive ones.
func TestPeakActivationsZeroLength(t *testing.T) {
	parse := func(text string) ir.Program {
		p, err := ir.ParseText(text)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		p    ir.Program
		cost string
		want []int
	}{
		{"gpipe P=2 M=8 zero", naiveComm(gpipe(2, 8)), "F=0,B=0,W=0", []int{8, 8}},
		{"gpipe P=4 M=8 zero compute-only", gpipe(4, 8), "F=0,B=0,W=0", []int{8, 8, 8, 8}},
		{"1f1b P=4 M=8 zero", onef1bComm(4, 8), "F=0,B=0,W=0", []int{4, 3, 2, 1}},
		{"1f1b split P=4 M=8 zero", onef1b(4, 8, true), "F=0,B=0,I=0,W=0", []int{4, 3, 2, 1}},
		{"1f1b P=4 M=8 F=1 B=0", onef1bComm(4, 8), "F=1,B=0,W=0", []int{4, 3, 2, 1}},
		{"1f1b split P=4 M=8 F=0 I=1 W=0", onef1b(4, 8, true), "F=0,B=1,I=1,W=0", []int{4, 3, 2, 1}},
		{"gpipe P=2 M=8 F=0 B=1", naiveComm(gpipe(2, 8)), "F=0,B=1,W=0", []int{8, 8}},
		{"gpipe P=2 M=8 stage 0 free", naiveComm(gpipe(2, 8)), "F=0:1,B=0:2,W=0:1", []int{8, 8}},
		{"1f1b P=4 M=8 stages 1, 3 free", onef1bComm(4, 8), "F=1:0:1:0,B=2:0:2:0,W=1:0:1:0,comm=0.5", []int{4, 3, 2, 1}},
		{"B before next F zero", parse("rank 0: 0F0 0B0 0F1 0B1\n"), "F=0,B=0,W=0", []int{1}},
		{"B before next F, F positive", parse("rank 0: 0F0 0B0 0F1 0B1\n"), "F=1,B=0,W=0", []int{1}},
		{"B before next F, B positive", parse("rank 0: 0F0 0B0 0F1 0B1\n"), "F=0,B=1,W=0", []int{1}},
		{"two F before their B zero", parse("rank 0: 0F0 0F1 0B0 0B1\n"), "F=0,B=0,W=0", []int{2}},
		{"chunk held to its W zero", parse("rank 0: 0F0 0I0 0F1 0W0 0I1 0W1\n"), "F=0,B=0,I=0,W=0", []int{2}},
		{"swapped out zero", parse("rank 0: 0F0 0SWAP_LAUNCH_OFFLOAD0 0SWAP_WAIT_OFFLOAD0 0F1 0F2 0B2 0SWAP_LAUNCH_LOAD0 0B1 0SWAP_WAIT_LOAD0 0B0\n"), "F=0,B=0,W=0,swap=0", []int{2}},
		{"forward-only zero", parse("rank 0: 0F0 0F1 0F2\n"), "F=0", []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseCost(tc.cost, 0)
			if err != nil {
				t.Fatal(err)
			}
			r := mustRun(t, tc.p, c)
			if !reflect.DeepEqual(r.PeakActivations, tc.want) {
				t.Errorf("peak activations %v, want %v", r.PeakActivations, tc.want)
			}
			act := make([]float64, tc.p.Stages())
			for s := range act {
				act[s] = 2
			}
			for i, v := range r.PeakMemory(act) {
				if v != float64(2*tc.want[i]) {
					t.Errorf("rank %d: PeakMemory with act 2 = %g, want %d", i, v, 2*tc.want[i])
				}
			}
		})
	}
}
