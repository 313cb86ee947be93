package verify_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/verify"
)

// blocked is the expected part of a deadlock ring entry.
type blocked struct {
	rank, index int
	step        string
	peer        int
}

func TestCheckRejects(t *testing.T) {
	tests := []struct {
		name  string
		bad   string // rejected
		fixed string // the same program with the order fixed: accepted ("" = none)
		place string // placement table, "" = inferred
		opt   verify.Options
		// for an *Error
		rank, index int
		step        string
		code        verify.Code
		reason      string // substring
		// for a *DeadlockError
		cycle   []blocked
		compute bool
	}{
		{
			name: "crossed send/recv order between two ranks",
			bad: "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1",
			fixed: "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1",
			cycle: []blocked{{0, 3, "0SEND_F1", 1}, {1, 3, "1SEND_B0", 0}},
		},
		{
			// S=6, loop placement: rank r holds stages r and r+3. Two
			// receives posted far too early close a ring 0 -> 1 -> 2 -> 0.
			name: "receives posted too early close a ring of three ranks",
			bad: "rank 0: 0F0 0SEND_F0 3RECV_F0 3F0 3SEND_F0 3RECV_B0 3B0 3SEND_B0 0RECV_B0 0B0\n" +
				"rank 1: 4RECV_B0 1RECV_F0 1F0 1SEND_F0 4RECV_F0 4F0 4SEND_F0 4B0 4SEND_B0 1RECV_B0 1B0 1SEND_B0\n" +
				"rank 2: 2RECV_B0 2RECV_F0 2F0 2SEND_F0 5RECV_F0 5F0 5B0 5SEND_B0 2B0 2SEND_B0",
			fixed: "rank 0: 0F0 0SEND_F0 3RECV_F0 3F0 3SEND_F0 3RECV_B0 3B0 3SEND_B0 0RECV_B0 0B0\n" +
				"rank 1: 1RECV_F0 1F0 1SEND_F0 4RECV_F0 4F0 4SEND_F0 4RECV_B0 4B0 4SEND_B0 1RECV_B0 1B0 1SEND_B0\n" +
				"rank 2: 2RECV_F0 2F0 2SEND_F0 5RECV_F0 5F0 5B0 5SEND_B0 2RECV_B0 2B0 2SEND_B0",
			cycle: []blocked{{0, 1, "0SEND_F0", 1}, {1, 0, "4RECV_B0", 2}, {2, 0, "2RECV_B0", 0}},
		},
		{
			name: "missing recv",
			bad: "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n" +
				"rank 1: 1F0 1B0 1SEND_B0",
			fixed: "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n" +
				"rank 1: 1RECV_F0 1F0 1B0 1SEND_B0",
			rank: 1, index: 0, step: "1F0", code: verify.Order,
			reason: "1F0 needs its input from stage 0 on rank 0: 1RECV_F0 must come earlier on rank 1, but it never runs on this rank",
		},
		{
			name: "recv with no matching send (its producer never sends)",
			bad: "rank 0: 0F0 0SEND_F0 0F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1",
			fixed: "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1",
			rank: 1, index: 4, step: "1RECV_F1", code: verify.Unmatched,
			reason: "has no partner: on the act channel from rank 0 to rank 1 there are 2 receives but only 1 sends",
		},
		{
			name: "sends in the wrong order pair with the wrong receives",
			bad: "rank 0: 0F0 0F1 0SEND_F1 0SEND_F0 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1",
			fixed: "rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1",
			rank: 0, index: 2, step: "0SEND_F1", code: verify.Mismatch,
			reason: "pairs (FIFO, transfer #1 on the act channel from rank 0 to rank 1) with rank 1 step 0 (1RECV_F0), but it must meet 1RECV_F1",
		},
		{
			name: "compute before its input",
			bad: "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n" +
				"rank 1: 1F0 1RECV_F0 1B0 1SEND_B0",
			fixed: "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n" +
				"rank 1: 1RECV_F0 1F0 1B0 1SEND_B0",
			rank: 1, index: 0, step: "1F0", code: verify.Order,
			reason: "it comes later, at step 1",
		},
		{
			name:  "send before its producer",
			bad:   "rank 0: 0SEND_F0 0F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0",
			fixed: "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0",
			rank:  0, index: 0, step: "0SEND_F0", code: verify.Order,
			reason: "needs the output it sends: 0F0 must come earlier on rank 0, but it comes later, at step 1",
		},
		{
			name:  "W before I",
			bad:   "rank 0: 0F0 0SEND_F0 0RECV_B0 0W0 0I0\nrank 1: 1RECV_F0 1F0 1I0 1SEND_B0 1W0",
			fixed: "rank 0: 0F0 0SEND_F0 0RECV_B0 0I0 0W0\nrank 1: 1RECV_F0 1F0 1I0 1SEND_B0 1W0",
			rank:  0, index: 3, step: "0W0", code: verify.Order,
			reason: "0W0 needs the I of its chunk: 0I0 must come earlier on rank 0, but it comes later, at step 4",
		},
		{
			name:  "W after a full B",
			bad:   "rank 0: 0F0 0B0 0W0",
			fixed: "rank 0: 0F0 0I0 0W0",
			rank:  0, index: 2, step: "0W0", code: verify.Order,
			reason: "follows only an I, but this chunk ran a full B (step 1)",
		},
		{
			name:  "duplicate F",
			bad:   "rank 0: 0F0 0F1 0F0 0B0 0B1",
			fixed: "rank 0: 0F0 0F1 0B0 0B1",
			rank:  0, index: 2, step: "0F0", code: verify.Duplicate,
			reason: "0F0 runs twice on this rank (first at step 0)",
		},
		{
			name:  "B and I of one chunk",
			bad:   "rank 0: 0F0 0B0 0I0 0W0",
			fixed: "rank 0: 0F0 0I0 0W0",
			rank:  0, index: 2, step: "0I0", code: verify.Duplicate,
			reason: "a second backward of stage 0 micro 0 (step 1 ran 0B0)",
		},
		{
			name:  "missing backward",
			bad:   "rank 0: 0F0 0F1 0B0",
			fixed: "rank 0: 0F0 0F1 0B0 0B1",
			rank:  0, index: -1, step: "0B1", code: verify.Missing,
			reason: "never runs: micro-batch 1's backward of stage 0 (0B1, or 0I1 then 0W1) is missing, though its forward 0F1 runs at step 1",
		},
		{
			name:  "I without W",
			bad:   "rank 0: 0F0 0I0",
			fixed: "rank 0: 0F0 0I0 0W0",
			rank:  0, index: -1, step: "0W0", code: verify.Missing,
			reason: "never runs, but 0I0 ran at step 1",
		},
		{
			name:  "backward before its forward",
			bad:   "rank 0: 0B0 0F0",
			fixed: "rank 0: 0F0 0B0",
			rank:  0, index: 0, step: "0B0", code: verify.Order,
			reason: "needs its forward: 0F0 must come earlier on rank 0, but it comes later, at step 1",
		},
		{
			name:  "colocated stages out of order",
			bad:   "rank 0: 0F0 0B0 1F0 1B0",
			fixed: "rank 0: 0F0 1F0 1B0 0B0",
			place: "0,0",
			rank:  0, index: 1, step: "0B0", code: verify.Order,
			reason: "needs its output gradient from the colocated stage: 1B0 must come earlier on rank 0",
		},
		{
			name:  "halves of an overlap cannot feed each other",
			bad:   "rank 0: 0F0 (1F0;1B0)OVERLAP_F_B 0B0",
			fixed: "rank 0: 0F0 1F0 1B0 0B0",
			place: "0,0",
			rank:  0, index: 1, step: "(1F0;1B0)OVERLAP_F_B", code: verify.Order,
			reason: "it is the other half of this overlap",
		},
		{
			name:  "overlap of the wrong shape",
			bad:   "rank 0: 0F0 (0F1;0F2)OVERLAP_F_B 0B0 0B1 0B2",
			fixed: "rank 0: 0F0 0F1 0F2 0B0 0B1 0B2",
			rank:  0, index: 1, step: "(0F1;0F2)OVERLAP_F_B", code: verify.Structure,
			reason: "OVERLAP_F_B runs a forward and a backward (B, I or W) in the order (F;B)",
		},
		{
			name:  "forward before its data load",
			bad:   "rank 0: 0F0 0DATA_LOAD0 0B0",
			fixed: "rank 0: 0DATA_LOAD0 0F0 0B0",
			rank:  0, index: 0, step: "0F0", code: verify.Order,
			reason: "0F0 needs its input: 0DATA_LOAD0 must come earlier on rank 0, but it comes later, at step 1",
		},
		{
			name:  "last stage without labels",
			bad:   "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0",
			fixed: "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1SEND_B0",
			rank:  1, index: 1, step: "1F0", code: verify.Order,
			reason: "needs the labels of micro 0 for the loss: 1DATA_LOAD0 or 1DATA_RECV0 must come earlier on rank 1",
		},
		{
			name:  "optimizer step before a backward",
			bad:   "rank 0: 0F0 OPT_STEP 0B0",
			fixed: "rank 0: 0F0 0B0 OPT_STEP",
			rank:  0, index: 1, step: "OPT_STEP", code: verify.Order,
			reason: "OPT_STEP must follow every compute step of its rank, but step 2 (0B0) runs after it",
		},
		{
			name:  "optimizer step on one rank only",
			bad:   "rank 0: 0F0 1F0 1B0 0B0 OPT_STEP\nrank 1: 2F0 2B0",
			fixed: "rank 0: 0F0 1F0 1B0 0B0 OPT_STEP\nrank 1: 2F0 2B0 OPT_STEP",
			place: "0,0,1",
			rank:  1, index: -1, step: "OPT_STEP", code: verify.Missing,
			reason: "never runs on this rank, but rank 0 steps its optimizer (step 4); OPT_STEP runs on every rank or on none",
		},
		{
			name:  "optimizer step on the last rank only",
			bad:   "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0 OPT_STEP",
			fixed: "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 OPT_STEP\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0 OPT_STEP",
			rank:  0, index: -1, step: "OPT_STEP", code: verify.Missing,
			reason: "never runs on this rank, but rank 1 steps its optimizer (step 4)",
		},
		{
			name:    "compute-only: cross-rank dependency cycle",
			bad:     "rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1B1 1F0 1B0",
			fixed:   "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1",
			cycle:   []blocked{{0, 1, "0B0", 1}, {1, 0, "1F1", 0}},
			compute: true,
		},
		{
			name:  "activation limit",
			bad:   "rank 0: 0F0 0F1 0F2 0B0 0B1 0B2",
			fixed: "rank 0: 0F0 0F1 0B0 0F2 0B1 0B2",
			opt:   verify.Options{MaxActivations: 2},
			rank:  0, index: 2, step: "0F2", code: verify.Memory,
			reason: "3 chunks are live here (from their F to their last backward), over the limit of 2",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := parse(t, tc.bad, tc.place)
			_, err := verify.Check(bad, tc.opt)
			if err == nil {
				t.Fatalf("accepted:\n%s", ir.FormatText(bad))
			}
			if tc.cycle != nil {
				var dl *verify.DeadlockError
				if !errors.As(err, &dl) {
					t.Fatalf("error %v (%T), want *DeadlockError", err, err)
				}
				if dl.Compute != tc.compute {
					t.Errorf("Compute = %v", dl.Compute)
				}
				if len(dl.Cycle) != len(tc.cycle) {
					t.Fatalf("cycle %v, want %v", err, tc.cycle)
				}
				for i, w := range tc.cycle {
					g := dl.Cycle[i]
					if g.Rank != w.rank || g.Index != w.index || g.Step.String() != w.step || g.Peer != w.peer {
						t.Errorf("cycle[%d] = rank %d step %d %s peer %d; want %+v", i, g.Rank, g.Index, g.Step, g.Peer, w)
					}
				}
			} else {
				var e *verify.Error
				if !errors.As(err, &e) {
					t.Fatalf("error %v (%T), want *Error", err, err)
				}
				if e.Rank != tc.rank || e.Index != tc.index || e.Step.String() != tc.step || e.Code != tc.code {
					t.Errorf("got rank %d index %d step %s code %s; want rank %d index %d step %s code %s\n%v",
						e.Rank, e.Index, e.Step, e.Code, tc.rank, tc.index, tc.step, tc.code, err)
				}
				if !strings.Contains(e.Reason, tc.reason) {
					t.Errorf("reason %q\ndoes not contain %q", e.Reason, tc.reason)
				}
			}
			if tc.fixed != "" {
				if _, err := verify.Check(parse(t, tc.fixed, tc.place), tc.opt); err != nil {
					t.Errorf("fixed program rejected: %v", err)
				}
			}
		})
	}
}

func parse(t *testing.T, text, place string) ir.Program {
	t.Helper()
	p, err := ir.ParseText(text)
	if err != nil {
		t.Fatal(err)
	}
	if place != "" {
		pl, err := ir.ParsePlacement(place, len(p.Ranks), 0)
		if err != nil {
			t.Fatal(err)
		}
		p.Placement = pl
		if err := p.ResolvePeers(); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestCheckStructure(t *testing.T) {
	base := func() ir.Program {
		p, _, err := passes.Lower(oneF1B(2, 2), passes.Options{Comm: passes.CommOptions{Order: passes.Late}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name   string
		mutate func(p *ir.Program)
		want   string // full message prefix or substring
		code   verify.Code
	}{
		{"wrong peer", func(p *ir.Program) { p.Ranks[0][2].Peer = 0 }, "rank 0 step 2 (0SEND_F0): peer 0, but the placement puts the other end on rank 1", verify.Structure},
		{"unset peer", func(p *ir.Program) { p.Ranks[0][2].Peer = ir.None }, "peer not set; the placement puts the other end on rank 1 (use Program.ResolvePeers)", verify.Structure},
		{"stage on the wrong rank", func(p *ir.Program) { p.Ranks[0][1].Stage = 1 }, "rank 0 step 1 (1F0): stage 1 lives on rank 1 (placement loop), not on rank 0", verify.Structure},
		{"micro out of range", func(p *ir.Program) { p.Ranks[0][1].Micro = 9 }, "rank 0 step 1 (0F9): micro-batch 9 is outside 0..1", verify.Structure},
		{"stage out of range", func(p *ir.Program) { p.Ranks[0][1].Stage = -3 }, "stage -3 is outside 0..1", verify.Structure},
		{"send past the last stage", func(p *ir.Program) { p.Ranks[1] = append(p.Ranks[1], ir.Comm(ir.SendF, 1, 0, 0)) }, "stage 1 has no neighbour to send to", verify.Structure},
		{"slot inconsistent", func(p *ir.Program) { p.Ranks[0][1].Slot = 5 }, "rank 0 step 1 (0F0): 0F0 uses slot 5, but its chunk (stage 0, micro 0) has slot 0 since step 0; a chunk keeps one slot", verify.Slot},
		{"slot lifetimes overlap", func(p *ir.Program) {
			for i := range p.Ranks[0] {
				if p.Ranks[0][i].Micro == 1 {
					p.Ranks[0][i].Slot = 0
				}
			}
		}, "starts chunk (stage 0, micro 1) in slot 0, which still holds chunk (stage 0, micro 0) until step", verify.Slot},
		{"slot missing on one step", func(p *ir.Program) { p.Ranks[1][0].Slot = ir.None }, "has no slot, but the program's slots are assigned", verify.Slot},
		{"placement size", func(p *ir.Program) { p.Placement.NumRanks = 3 }, "program: the placement has 3 ranks but the program has 2 rank lists", verify.Structure},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			if _, err := verify.Check(p, verify.Options{}); err != nil {
				t.Fatalf("base rejected: %v", err)
			}
			tc.mutate(&p)
			_, err := verify.Check(p, verify.Options{})
			var e *verify.Error
			if !errors.As(err, &e) || e.Code != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v (code %v)\nwant %s: %q", err, codeOf(err), tc.code, tc.want)
			}
		})
	}
}

func codeOf(err error) verify.Code {
	var e *verify.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

func TestErrorMessages(t *testing.T) {
	e := &verify.Error{Rank: 2, Index: 17, Step: ir.Comm(ir.RecvF, 3, 5, 1), Code: verify.Unmatched, Reason: "has no partner"}
	if got, want := e.Error(), "rank 2 step 17 (3RECV_F5): has no partner"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	d := &verify.DeadlockError{Cycle: []verify.Blocked{
		{Rank: 0, Index: 12, Step: ir.Comm(ir.SendF, 1, 3, 1), Peer: 1},
		{Rank: 1, Index: 9, Step: ir.Comm(ir.SendB, 2, 0, 0), Peer: 0},
	}}
	if got, want := d.Error(), "deadlock: rank 0 at step 12 1SEND_F3 waits for rank 1; rank 1 at step 9 2SEND_B0 waits for rank 0"; !strings.HasPrefix(got, want) {
		t.Errorf("%q\nwant prefix %q", got, want)
	}
}

func TestReport(t *testing.T) {
	for P := 1; P <= 5; P++ {
		M := 2 * P
		for _, tc := range []struct {
			name string
			p    ir.Program
			peak func(r int) int
		}{
			{"1f1b", oneF1B(P, M), func(r int) int { return P - r }},
			{"gpipe", gpipe(P, M), func(int) int { return M }},
		} {
			rep, err := verify.Check(tc.p, verify.Options{})
			if err != nil {
				t.Fatal(err)
			}
			q, info, err := passes.Lower(tc.p, passes.Options{})
			if err != nil {
				t.Fatal(err)
			}
			lrep, err := verify.Check(q, verify.Options{MaxActivations: max(P, M)})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Lowered || lrep.Lowered != (P > 1) || rep.Transfers != 0 || lrep.Transfers != 4*(P-1)*M || lrep.Steps != q.NumSteps() {
				t.Errorf("%s P=%d: report %+v / %+v", tc.name, P, rep, lrep)
			}
			for r := range P {
				if rep.PeakActivations[r] != tc.peak(r) || lrep.PeakActivations[r] != tc.peak(r) {
					t.Errorf("%s P=%d rank %d: peak %d / %d, want %d", tc.name, P, r, rep.PeakActivations[r], lrep.PeakActivations[r], tc.peak(r))
				}
				if lrep.Slots[r] != info.Slots[r] || lrep.Slots[r] < tc.peak(r) {
					t.Errorf("%s P=%d rank %d: slots %d (passes says %d), peak %d", tc.name, P, r, lrep.Slots[r], info.Slots[r], tc.peak(r))
				}
			}
			if lim := tc.peak(0) - 1; lim == 0 {
				continue // 0 means unlimited
			}
			if _, err := verify.Check(q, verify.Options{MaxActivations: tc.peak(0) - 1}); codeOf(err) != verify.Memory {
				t.Errorf("%s P=%d: limit below the peak: %v", tc.name, P, err)
			}
		}
	}
}

// TestBeside: Check runs Options.Beside exactly once before it returns,
// whether the program passes or fails, on the parallel path (where it runs
// beside the deadlock simulation) and the serial one.
func TestBeside(t *testing.T) {
	lowered, _, err := passes.Lower(oneF1B(4, 8), passes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	crossed := parse(t, "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"+
		"rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1", "")
	noStages := lowered
	noStages.Placement = ir.Placement{NumRanks: len(lowered.Ranks)}
	for _, minSteps := range []int{0, par.MinSteps} {
		for _, tc := range []struct {
			name string
			p    ir.Program
			ok   bool
		}{
			{"lowered", lowered, true},
			{"compute order", oneF1B(4, 8), true},
			{"deadlock", crossed, false},
			{"structure", noStages, false},
		} {
			old := par.MinSteps
			par.MinSteps = minSteps
			calls := 0
			_, err := verify.Check(tc.p, verify.Options{Beside: func() { calls++ }})
			par.MinSteps = old
			if (err == nil) != tc.ok {
				t.Errorf("%s (MinSteps %d): Check = %v, want ok %v", tc.name, minSteps, err, tc.ok)
			}
			if calls != 1 {
				t.Errorf("%s (MinSteps %d): Beside ran %d times, want once", tc.name, minSteps, calls)
			}
		}
	}
}

// TestMismatchManyRanks: past densePairs (256) ranks match numbers the
// (source, destination) pairs that occur instead of all P² of them; a FIFO
// mismatch there is found and named as with a few ranks.
func TestMismatchManyRanks(t *testing.T) {
	for _, P := range []int{4, 300} {
		low, _, err := passes.Lower(gpipe(P, 2), passes.Options{NoOptStep: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := verify.Check(low, verify.Options{}); err != nil {
			t.Fatalf("P=%d: the lowered program: %v", P, err)
		}
		// Rank P-1 receives F of micros 0 and 1 from rank P-2: post both
		// first, micro 1's first (the steps stay in order; FIFO pairs
		// rank P-2's first send with the wrong receive).
		r := P - 1
		var recvs, rest []ir.Step
		for _, st := range low.Ranks[r] {
			if st.Kind == ir.RecvF {
				recvs = append(recvs, st)
			} else {
				rest = append(rest, st)
			}
		}
		if len(recvs) != 2 {
			t.Fatalf("P=%d: rank %d has %d RECV_F, want 2", P, r, len(recvs))
		}
		low.Ranks[r] = append([]ir.Step{recvs[1], recvs[0]}, rest...)
		first := slices.IndexFunc(low.Ranks[r-1], func(st ir.Step) bool { return st.Kind == ir.SendF })
		_, err = verify.Check(low, verify.Options{})
		var ve *verify.Error
		if !errors.As(err, &ve) || ve.Code != verify.Mismatch || ve.Rank != r-1 || ve.Index != first {
			t.Fatalf("P=%d: got %v, want a Mismatch at rank %d step %d", P, err, r-1, first)
		}
		if want := fmt.Sprintf("from rank %d to rank %d", r-1, r); !strings.Contains(ve.Reason, want) {
			t.Fatalf("P=%d: %q does not say %q", P, ve.Reason, want)
		}
	}
}
