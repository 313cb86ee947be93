package passes

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

func TestInsertCommLate(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		place string // placement table; "" = inferred
		want  string
	}{
		{
			name: "one micro, two ranks",
			in:   "rank 0: 0F0 0B0\nrank 1: 1F0 1B0",
			want: "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n",
		},
		{
			name: "1F1B P=2 M=2: the crossed rendezvous hoists a RECV_B over one SEND_F",
			in:   "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1",
			want: "rank 0: 0F0 0SEND_F0 0F1 0RECV_B0 0SEND_F1 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
		},
		{
			name: "V placement: no transfer at the turn",
			in:   "rank 0: 0F0 3F0 3B0 0B0\nrank 1: 1F0 2F0 2B0 1B0",
			want: "rank 0: 0F0 0SEND_F0 3RECV_F0 3F0 3B0 3SEND_B0 0RECV_B0 0B0\n" +
				"rank 1: 1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2B0 1B0 1SEND_B0\n",
		},
		{
			name:  "consecutive stages on one rank exchange no transfer",
			in:    "rank 0: 0F0 1F0 1B0 0B0\nrank 1: 2F0 2B0",
			place: "0,0,1",
			want:  "rank 0: 0F0 1F0 1SEND_F0 1RECV_B0 1B0 0B0\nrank 1: 2RECV_F0 2F0 2B0 2SEND_B0\n",
		},
		{
			name: "overlap: receives before the composite, sends after it; no crossing, no hoist",
			in:   "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 (1F1;1B0)OVERLAP_F_B 1B1",
			want: "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1RECV_F0 1F0 1RECV_F1 (1F1;1B0)OVERLAP_F_B 1SEND_B0 1B1 1SEND_B1\n",
		},
		{
			name: "split backward: I sends, W does not",
			in:   "rank 0: 0F0 0I0 0W0\nrank 1: 1F0 1I0 1W0",
			want: "rank 0: 0F0 0SEND_F0 0RECV_B0 0I0 0W0\nrank 1: 1RECV_F0 1F0 1I0 1SEND_B0 1W0\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := mustParse(tc.in)
			if tc.place != "" {
				pl, err := ir.ParsePlacement(tc.place, len(in.Ranks), 0)
				if err != nil {
					t.Fatal(err)
				}
				in.Placement = pl
			}
			before := ir.FormatText(in)
			got, err := InsertComm(in, CommOptions{Order: Late})
			if err != nil {
				t.Fatal(err)
			}
			if s := ir.FormatText(got); s != tc.want {
				t.Errorf("got\n%swant\n%s", s, tc.want)
			}
			if ir.FormatText(in) != before {
				t.Errorf("input modified")
			}
			checkPeers(t, got)
			if _, err := verify.Check(got, verify.Options{}); err != nil {
				t.Errorf("output does not verify: %v", err)
			}
		})
	}
}

// checkPeers asserts every transfer's peer is the placement's.
func checkPeers(t *testing.T, p ir.Program) {
	t.Helper()
	for r, steps := range p.Ranks {
		for i, st := range steps {
			if st.Kind.IsComm() && st.Peer != p.Placement.PeerOf(st.Kind, st.Stage) {
				t.Errorf("rank %d step %d %s: peer %d, want %d", r, i, st, st.Peer, p.Placement.PeerOf(st.Kind, st.Stage))
			}
		}
	}
}

func TestInsertCommEager(t *testing.T) {
	// Hand-run of PyTorch's _add_send_recv rounds (ranks in order each round).
	in := mustParse("rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1")
	got, err := InsertComm(in, CommOptions{Order: Eager})
	if err != nil {
		t.Fatal(err)
	}
	want := "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
		"rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1\n"
	if s := ir.FormatText(got); s != want {
		t.Errorf("got\n%swant\n%s", s, want)
	}
	if d := RecvDistance(got); d != 0.25 { // 1RECV_F1 waits over 1B0
		t.Errorf("RecvDistance = %v, want 0.25", d)
	}
}

func TestInsertCommErrors(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		eager bool
		want  string // substring of the message
		cycle []Blocked
	}{
		{
			name: "infeasible compute order: a ring of ranks",
			in:   "rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1B1 1F0 1B0",
			want: "rank 0 at step 1 (0B0) waits for 1B0 on rank 1; rank 1 at step 0 (1F1) waits for 0F1 on rank 0",
			cycle: []Blocked{
				{Rank: 0, Index: 1, Step: ir.Compute(ir.Backward, 0, 0), On: ir.Compute(ir.Backward, 1, 0), Peer: 1},
				{Rank: 1, Index: 0, Step: ir.Compute(ir.Forward, 1, 1), On: ir.Compute(ir.Forward, 0, 1), Peer: 0},
			},
		},
		{
			name:  "infeasible compute order, eager",
			in:    "rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1B1 1F0 1B0",
			eager: true,
			want:  "rank 0 at step 1 (0B0) waits for 1B0 on rank 1; rank 1 at step 0 (1F1) waits for 0F1 on rank 0",
		},
		{
			name: "already lowered",
			in:   "rank 0: 0F0 0SEND_F0 0B0\nrank 1: 1RECV_F0 1F0 1B0",
			want: "rank 0 step 1 (0SEND_F0): the program already holds transfer steps",
		},
		{
			name: "duplicate forward",
			in:   "rank 0: 0F0 0F0 0B0\nrank 1: 1F0 1B0",
			want: "rank 0 step 1 (0F0): 0F0 runs twice",
		},
		{
			name: "consumer without producer",
			in:   "rank 0: 0F0 0B0\nrank 1: 1F0 1B0 1F1 1B1",
			want: "rank 1 step 2 (1F1): needs the output of 0F1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := InsertComm(mustParse(tc.in), CommOptions{Order: orderOf(tc.eager)})
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tc.want)
			}
			if tc.cycle != nil {
				var ce *CycleError
				if !errors.As(err, &ce) {
					t.Fatalf("error %T, want *CycleError", err)
				}
				if len(ce.Cycle) != len(tc.cycle) {
					t.Fatalf("cycle %+v, want %+v", ce.Cycle, tc.cycle)
				}
				for i := range tc.cycle {
					g, w := ce.Cycle[i], tc.cycle[i]
					if g.Rank != w.Rank || g.Index != w.Index || g.Peer != w.Peer || !g.Step.SameAction(w.Step) || !g.On.SameAction(w.On) {
						t.Errorf("cycle[%d] = %+v, want %+v", i, g, w)
					}
				}
			}
		})
	}
	// Input out of range is an error, not a panic.
	bad := mustParse("rank 0: 0F0 0B0\nrank 1: 1F0 1B0")
	bad.Ranks[1][0].Micro = 7
	if _, err := InsertComm(bad, CommOptions{}); err == nil || !strings.Contains(err.Error(), "micro-batch 7 is outside 0..0") {
		t.Errorf("out-of-range micro: %v", err)
	}
	bad = mustParse("rank 0: 0F0 0B0\nrank 1: 1F0 1B0")
	bad.Ranks[0] = append(bad.Ranks[0], ir.Compute(ir.Forward, 1, 0))
	if _, err := InsertComm(bad, CommOptions{}); err == nil || !strings.Contains(err.Error(), "stage 1 lives on rank 1") {
		t.Errorf("wrong rank: %v", err)
	}
}

// families returns the fixture compute orders for P ranks and M micro-batches.
func families(P, M int) map[string]ir.Program {
	return map[string]ir.Program{
		"1f1b":        oneF1B(P, M),
		"gpipe":       gpipe(P, M),
		"zb":          zbLike(P, M),
		"interleaved": interleaved(P, 2, M),
		"v":           vshape(P, M, false),
		"v-split":     vshape(P, M, true),
	}
}

func TestInsertCommAlwaysVerifies(t *testing.T) {
	for P := 1; P <= 6; P++ {
		for M := 1; M <= 2*P; M++ {
			for name, p := range families(P, M) {
				var dist [2]float64
				for e, eager := range []bool{false, true} {
					q, err := InsertComm(InsertData(p), CommOptions{Order: orderOf(eager)})
					if err != nil {
						t.Fatalf("%s P=%d M=%d eager=%v: %v", name, P, M, eager, err)
					}
					if !q.ComputeOnly().Ranks[0][0].Equal(p.Ranks[0][0]) || q.ComputeOnly().NumSteps() != p.NumSteps() {
						t.Fatalf("%s P=%d M=%d: compute order changed", name, P, M)
					}
					q, _, err = AssignSlots(q)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := verify.Check(q, verify.Options{}); err != nil {
						t.Fatalf("%s P=%d M=%d eager=%v: %v\n%s", name, P, M, eager, err, ir.FormatText(q))
					}
					dist[e] = RecvDistance(q)
				}
				if dist[0] > dist[1] {
					t.Errorf("%s P=%d M=%d: late recv distance %.3f > eager %.3f", name, P, M, dist[0], dist[1])
				}
			}
		}
	}
}

// TestInsertCommRandom: on random feasible orders both placements succeed and
// verify; on random per-rank orders InsertComm fails exactly when the compute
// order itself is infeasible (verify's compute-only deadlock).
func TestInsertCommRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var infeasible, fused int
	defer func() { t.Logf("%d infeasible orders, %d with overlaps", infeasible, fused) }()
	for iter := range 600 {
		P := 1 + rng.IntN(5)
		M := 1 + rng.IntN(2*P)
		pl := ir.Loop(P, 1+rng.IntN(2))
		if rng.IntN(3) == 0 {
			pl = ir.VShape(P)
		}
		var p ir.Program
		if iter%2 == 0 {
			p = randomFeasible(rng, pl, M)
		} else {
			p = randomOrder(rng, pl, M, rng.IntN(2) == 0)
		}
		if iter%3 == 1 {
			p = fuseRandom(rng, p)
			fused++
		}
		_, cerr := verify.Check(p, verify.Options{})
		var dl *verify.DeadlockError
		if cerr != nil && !errors.As(cerr, &dl) {
			t.Fatalf("iter %d: compute-only order rejected for a reason other than a cycle: %v", iter, cerr)
		}
		if cerr != nil {
			infeasible++
		}
		if iter%2 == 0 && iter%3 != 1 && cerr != nil {
			t.Fatalf("iter %d: greedy order infeasible: %v\n%s", iter, cerr, ir.FormatText(p))
		}
		for _, eager := range []bool{false, true} {
			q, err := InsertComm(p, CommOptions{Order: orderOf(eager)})
			if (err != nil) != (cerr != nil) {
				t.Fatalf("iter %d eager=%v: InsertComm error %v, compute-only verify %v\n%s", iter, eager, err, cerr, ir.FormatText(p))
			}
			if err != nil {
				var ce *CycleError
				if !errors.As(err, &ce) || len(ce.Cycle) == 0 || ce.Chain {
					t.Fatalf("iter %d: want a *CycleError ring, got %v", iter, err)
				}
				continue
			}
			if _, err := verify.Check(q, verify.Options{}); err != nil {
				t.Fatalf("iter %d eager=%v: %v\n%s", iter, eager, err, ir.FormatText(q))
			}
		}
	}
}

// TestInsertCommHoistsOnlyWhereNeeded: for 1F1B P=4 M=8 every RECV_F sits
// right before its F, every RECV_B right before its B or separated from it
// only by the SEND_F of the forward just before (the crossed rendezvous of
// the steady state), and moving any hoisted receive back to its consumer
// deadlocks.
func TestInsertCommHoistsOnlyWhereNeeded(t *testing.T) {
	q, err := InsertComm(oneF1B(4, 8), CommOptions{Order: Late})
	if err != nil {
		t.Fatal(err)
	}
	if d := RecvDistance(q); d != 0 {
		t.Errorf("RecvDistance = %v, want 0 (no receive waits over a compute step)", d)
	}
	hoisted := 0
	for r, steps := range q.Ranks {
		for i, st := range steps {
			if !st.Kind.IsRecv() {
				continue
			}
			j := i + 1
			for !steps[j].Kind.IsCompute() {
				j++
			}
			cons := steps[j]
			want := ir.Forward
			if st.Kind == ir.RecvB {
				want = ir.Backward
			}
			if cons.Kind != want || cons.Stage != st.Stage || cons.Micro != st.Micro {
				t.Fatalf("rank %d step %d %s: next compute step is %s", r, i, st, cons)
			}
			switch {
			case j == i+1:
			case st.Kind == ir.RecvB && j == i+2 && steps[i+1].Kind == ir.SendF:
				hoisted++
				// Un-hoist it: the program must then deadlock.
				u := q.Clone()
				u.Ranks[r][i], u.Ranks[r][i+1] = u.Ranks[r][i+1], u.Ranks[r][i]
				var dl *verify.DeadlockError
				if _, err := verify.Check(u, verify.Options{}); !errors.As(err, &dl) {
					t.Errorf("rank %d step %d %s: hoist not needed (un-hoisted verify: %v)", r, i, st, err)
				}
			default:
				t.Errorf("rank %d step %d %s: %d steps before its consumer %s", r, i, st, j-i, cons)
			}
		}
	}
	// Ranks 0..2 each hoist one RECV_B per steady-state F after the warm-up: M-(P-1-r)-1... count them.
	if hoisted != 5+6+7 {
		t.Errorf("%d hoisted receives, want 18 (ranks 0, 1, 2: one per steady-state forward)\n%s", hoisted, ir.FormatText(q))
	}
}

// TestInsertCommTimed: the timed order of 1F1B P=2 M=2, worked out by hand
// from the ideal timeline (F=1, B=2): rank 0 runs F0 [0,1] F1 [1,2] B0 [4,6]
// B1 [7,9]; rank 1 F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]. The transfers in key
// order are F0 (t=1), F1 (t=2), B0 (t=4), B1 (t=7). RECV_F1 on rank 1 slides
// past B0 (which ends at 4, when the next transfer on both ends is due) to
// just before SEND_B0, so no receive is hoisted over a send, unlike the late
// order.
func TestInsertCommTimed(t *testing.T) {
	in := mustParse("rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n")
	got, err := InsertComm(in, CommOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
		"rank 1: 1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1\n"
	if s := ir.FormatText(got); s != want {
		t.Errorf("got\n%swant\n%s", s, want)
	}
}

// TestInsertCommTimedFallsBack: without any positive compute cost the
// timed order's argument does not hold, and InsertComm uses the late order
// instead; a cost of 0 beside positive ones (a stage without an input
// gradient) is timed at a millionth of the largest, as if given so.
func TestInsertCommTimedFallsBack(t *testing.T) {
	in := oneF1B(3, 4)
	late, err := InsertComm(in, CommOptions{Order: Late})
	if err != nil {
		t.Fatal(err)
	}
	zero := sim.DefaultCost()
	zero.F, zero.B, zero.I, zero.W = []float64{0}, []float64{0}, []float64{0}, []float64{0}
	got, err := InsertComm(in, CommOptions{Cost: &zero})
	if err != nil {
		t.Fatal(err)
	}
	if ir.FormatText(got) != ir.FormatText(late) {
		t.Errorf("all-zero timed order did not fall back to late:\n%s", ir.FormatText(got))
	}
	someZero := sim.DefaultCost()
	someZero.F = []float64{0}
	tiny := sim.DefaultCost()
	tiny.F = []float64{2e-6} // a millionth of B = 2
	a, err := InsertComm(in, CommOptions{Cost: &someZero})
	if err != nil {
		t.Fatal(err)
	}
	b, err := InsertComm(in, CommOptions{Cost: &tiny})
	if err != nil {
		t.Fatal(err)
	}
	if ir.FormatText(a) != ir.FormatText(b) || ir.FormatText(a) == ir.FormatText(late) {
		t.Errorf("F = 0 gave\n%s\nwant the order of F = 2e-6\n%s\n(not the late one)", ir.FormatText(a), ir.FormatText(b))
	}
}
