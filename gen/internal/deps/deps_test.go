package deps_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

// render writes an input as "what producer@rank", plus " via RECV" when it
// reaches rank r over a transfer.
func render(in deps.Input, r int) string {
	s := fmt.Sprintf("%s %s@%d", in.What, ir.Compute(in.Kind, in.Stage, in.Micro), in.Rank)
	if in.Remote(r) {
		s += " via " + in.Recv.String()
	}
	return s
}

// TestOf pins the dependency model on small lowered programs of every kind
// the families produce, with the expected inputs of every compute step
// written by hand (keyed "rank: step"). Each program passes gen/verify, so
// the table holds real programs; every step not listed must consume nothing.
func TestOf(t *testing.T) {
	cases := []struct {
		name string
		text string
		want map[string][]string
	}{
		{"plain 1F1B", `
rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 OPT_STEP
rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1DATA_LOAD1 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1 OPT_STEP`,
			map[string][]string{
				"0: 0F0": {"owned input 0MPIPE_FWD_SEND0@0"},
				"0: 0F1": {"owned input 0MPIPE_FWD_SEND1@1 via MPIPE_FWD_RECV"},
				"1: 1F0": {"activation 0F0@0 via RECV_F", "labels 0DATA_SEND0@0 via DATA_RECV"},
				"1: 1F1": {"activation 0F1@0 via RECV_F", "labels 0DATA_SEND1@0 via DATA_RECV"},
				"1: 1B0": {"saved activations 1F0@1"},
				"1: 1B1": {"saved activations 1F1@1"},
				"0: 0B0": {"saved activations 0F0@0", "gradient 1B0@1 via RECV_B"},
				"0: 0B1": {"saved activations 0F1@0", "gradient 1B1@1 via RECV_B"},
			}},
		{"split I/W", `
rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0I0 0W0 OPT_STEP
rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1I0 1SEND_B0 1W0 OPT_STEP`,
			map[string][]string{
				"0: 0F0": {"owned input 0MPIPE_FWD_SEND0@0"},
				"1: 1F0": {"activation 0F0@0 via RECV_F", "labels 0DATA_SEND0@0 via DATA_RECV"},
				"1: 1I0": {"saved activations 1F0@1"},
				"1: 1W0": {"kept by I 1I0@1"},
				"0: 0I0": {"saved activations 0F0@0", "gradient 1B0@1 via RECV_B"},
				"0: 0W0": {"kept by I 0I0@0"},
			}},
		{"overlap", `
rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_LOAD1 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 OPT_STEP
rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1DATA_LOAD1 1RECV_F1 (1F1;1B0)OVERLAP_F_B 1SEND_B0 1B1 1SEND_B1 OPT_STEP`,
			map[string][]string{
				"0: 0F0": {"owned input 0MPIPE_FWD_SEND0@0"},
				"0: 0F1": {"owned input 0MPIPE_FWD_SEND1@1 via MPIPE_FWD_RECV"},
				"1: 1F0": {"activation 0F0@0 via RECV_F", "labels 0DATA_SEND0@0 via DATA_RECV"},
				// the overlap's halves, one at a time
				"1: 1F1": {"activation 0F1@0 via RECV_F", "labels 0DATA_SEND1@0 via DATA_RECV"},
				"1: 1B0": {"saved activations 1F0@1"},
				"1: 1B1": {"saved activations 1F1@1"},
				"0: 0B0": {"saved activations 0F0@0", "gradient 1B0@1 via RECV_B"},
				"0: 0B1": {"saved activations 0F1@0", "gradient 1B1@1 via RECV_B"},
			}},
		{"mpipe owned inputs", `
rank 0: 0DATA_LOAD0 0F0 0MPIPE_FWD_RECV1 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 OPT_STEP
rank 1: 0DATA_LOAD1 0MPIPE_FWD_SEND1 1DATA_LOAD0 1RECV_F0 1F0 1DATA_LOAD1 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1 OPT_STEP`,
			map[string][]string{
				"0: 0F0": {"owned input 0MPIPE_FWD_SEND0@0"},
				"0: 0F1": {"owned input 0MPIPE_FWD_SEND1@1 via MPIPE_FWD_RECV"},
				"1: 1F0": {"activation 0F0@0 via RECV_F", "labels 0DATA_SEND0@0 via DATA_RECV"},
				"1: 1F1": {"activation 0F1@0 via RECV_F", "labels 0DATA_SEND1@0 via DATA_RECV"},
				"1: 1B0": {"saved activations 1F0@1"},
				"1: 1B1": {"saved activations 1F1@1"},
				"0: 0B0": {"saved activations 0F0@0", "gradient 1B0@1 via RECV_B"},
				"0: 0B1": {"saved activations 0F1@0", "gradient 1B1@1 via RECV_B"},
			}},
		{"shipped labels", `
rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0DATA_SEND0 0RECV_B0 0B0 OPT_STEP
rank 1: 1RECV_F0 1DATA_RECV0 1F0 1B0 1SEND_B0 OPT_STEP`,
			map[string][]string{
				"0: 0F0": {"owned input 0MPIPE_FWD_SEND0@0"},
				"1: 1F0": {"activation 0F0@0 via RECV_F", "labels 0DATA_SEND0@0 via DATA_RECV"},
				"1: 1B0": {"saved activations 1F0@1"},
				"0: 0B0": {"saved activations 0F0@0", "gradient 1B0@1 via RECV_B"},
			}},
		{"FSDP", `
rank 0: 0UNSHARD 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 0RESHARD 0REDUCE_GRAD OPT_STEP
rank 1: 1UNSHARD 1DATA_LOAD0 1RECV_F0 1F0 1B0 1SEND_B0 1RESHARD 1REDUCE_GRAD OPT_STEP`,
			map[string][]string{
				"0: 0F0": {"owned input 0MPIPE_FWD_SEND0@0"},
				"1: 1F0": {"activation 0F0@0 via RECV_F", "labels 0DATA_SEND0@0 via DATA_RECV"},
				"1: 1B0": {"saved activations 1F0@1"},
				"0: 0B0": {"saved activations 0F0@0", "gradient 1B0@1 via RECV_B"},
			}},
		{"swap", `
rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0SWAP_LAUNCH_OFFLOAD0 0SWAP_WAIT_OFFLOAD0 0SWAP_LAUNCH_LOAD0 0SWAP_WAIT_LOAD0 0RECV_B0 0B0 OPT_STEP
rank 1: 1DATA_LOAD0 1RECV_F0 1F0 1B0 1SEND_B0 OPT_STEP`,
			map[string][]string{
				"0: 0F0": {"owned input 0MPIPE_FWD_SEND0@0"},
				"1: 1F0": {"activation 0F0@0 via RECV_F", "labels 0DATA_SEND0@0 via DATA_RECV"},
				"1: 1B0": {"saved activations 1F0@1"},
				// the swapped-out chunk still consumes its own F's activations
				"0: 0B0": {"saved activations 0F0@0", "gradient 1B0@1 via RECV_B"},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ir.ParseText(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.ResolvePeers(); err != nil {
				t.Fatal(err)
			}
			if _, err := verify.Check(p, verify.Options{}); err != nil {
				t.Fatalf("not a valid program: %v", err)
			}
			seen := map[string]bool{}
			var ins []deps.Input
			for r, steps := range p.Ranks {
				for i, st := range steps {
					leaves := []ir.Step{st}
					if st.Kind.IsOverlap() {
						leaves = st.Sub
					}
					for _, cs := range leaves {
						key := fmt.Sprintf("%d: %s", r, cs)
						ins = deps.Of(&p, &cs, ins[:0])
						checkNeighbour(t, &p, &cs, ins)
						for q := -1; q <= len(p.Ranks); q++ { // every rank, and two that are none
							checkRecvs(t, &p, &cs, q, ins)
						}
						if len(ins) > deps.MaxInputs {
							t.Errorf("%s: %d inputs, more than MaxInputs (%d)", key, len(ins), deps.MaxInputs)
						}
						var got []string
						for _, in := range ins {
							got = append(got, render(in, r))
							if in.Optional() {
								continue
							}
							checkFrom(t, p, r, i, cs, in)
						}
						want, listed := tc.want[key]
						seen[key] = listed
						if !slices.Equal(got, want) {
							t.Errorf("%s: got %q\nwant %q", key, got, want)
						}
					}
				}
			}
			for key := range tc.want {
				if !seen[key] {
					t.Errorf("%s: no such step", key)
				}
			}
		})
	}
}

// checkNeighbour checks that Neighbour(cs) is the Activation or Gradient
// entry of cs's inputs ins (deps.Of), and that Across and AcrossKinds give
// the same input in plain values.
func checkNeighbour(t *testing.T, p *ir.Program, cs *ir.Step, ins []deps.Input) {
	t.Helper()
	var want deps.Input
	found := false
	for _, in := range ins {
		if in.What == deps.Activation || in.What == deps.Gradient {
			want, found = in, true
		}
	}
	in, ok := deps.Neighbour(p, cs)
	if ok != found || in != want {
		t.Errorf("%s: Neighbour = %+v, %v; Of's cross-stage entry %+v, %v", cs, in, ok, want, found)
	}
	stage, rank, act, grad, aok := deps.Across(p, cs)
	kind, recv := deps.AcrossKinds(grad)
	if aok != ok || ok && (stage != in.Stage || rank != in.Rank || act != in.Act || grad != (in.What == deps.Gradient) || kind != in.Kind || recv != in.Recv) {
		t.Errorf("%s: Across = %d, %d, %d, %v, %v (kinds %s, %s); Neighbour = %+v, %v", cs, stage, rank, act, grad, aok, kind, recv, in, ok)
	}
	first, last := p.Route(cs.Micro)
	cstage, cgrad, cok := deps.Cross(cs.Kind, cs.Stage, first, last)
	if cok != aok || cok && (cstage != stage || cgrad != grad) {
		t.Errorf("%s: Cross = %d, %v, %v; Across = %d, %v, %v", cs, cstage, cgrad, cok, stage, grad, aok)
	}
	if a, b := deps.RemoteRecvs(grad); ok && (a != recv || b != map[bool]ir.Kind{true: ir.Invalid, false: ir.DataRecv}[grad]) {
		t.Errorf("%s: RemoteRecvs = %s, %s; the input comes over %s", cs, a, b, recv)
	}
}

// checkRecvs checks that Recvs(cs, r) lists the Recv of each of cs's
// inputs ins (deps.Of) that reaches rank r over a transfer, in order.
func checkRecvs(t *testing.T, p *ir.Program, cs *ir.Step, r int, ins []deps.Input) {
	t.Helper()
	var want []ir.Kind
	for _, in := range ins {
		if in.Remote(r) {
			want = append(want, in.Recv)
		}
	}
	a, b := deps.Recvs(p, cs, r)
	var got []ir.Kind
	for _, k := range [...]ir.Kind{a, b} {
		if k != ir.Invalid {
			got = append(got, k)
		}
	}
	if !slices.Equal(got, want) || a == ir.Invalid && b != ir.Invalid {
		t.Errorf("%s on rank %d: Recvs = %s, %s; Of's remote inputs come over %v", cs, r, a, b, want)
	}
}

// checkFrom checks that input in of step cs (index i of rank r) is there:
// a remote input's receive comes earlier on r; the producer runs on
// in.Rank (for a local one, earlier on r).
func checkFrom(t *testing.T, p ir.Program, r, i int, cs ir.Step, in deps.Input) {
	t.Helper()
	before := func(rank int, match func(ir.Step) bool, limit int) bool {
		for j, st := range p.Ranks[rank] {
			if j >= limit {
				break
			}
			if slices.ContainsFunc(st.Computes(), match) || match(st) {
				return true
			}
		}
		return false
	}
	if in.Remote(r) {
		recv := func(st ir.Step) bool { return st.Kind == in.Recv && st.Stage == cs.Stage && st.Micro == cs.Micro }
		if !before(r, recv, i) {
			t.Errorf("rank %d %s: no %s of its chunk before it", r, cs, in.Recv)
		}
	}
	prod := func(st ir.Step) bool {
		k := st.Kind
		if in.Kind == ir.Backward && k == ir.BackwardInput {
			k = ir.Backward // Backward stands for the chunk's B or I
		}
		return k == in.Kind && st.Stage == in.Stage && st.Micro == in.Micro
	}
	limit := len(p.Ranks[in.Rank])
	if in.Rank == r {
		limit = i + 1 // an overlap's other half counts as "there"
	}
	if !before(in.Rank, prod, limit) {
		t.Errorf("rank %d %s: %s does not run on rank %d", r, cs, ir.Compute(in.Kind, in.Stage, in.Micro), in.Rank)
	}
}

// TestOfEdges: steps of other kinds consume nothing, and stages outside
// the placement give producers on no rank instead of a panic.
func TestOfEdges(t *testing.T) {
	p := ir.NewProgram(ir.Placement{NumRanks: 2, RankOf: []int{0, 1}}, 2)
	for _, st := range []ir.Step{ir.Compute(ir.DataLoad, 0, 0), ir.Comm(ir.SendF, 0, 0, 1), ir.Compute(ir.OptStep, ir.None, ir.None), ir.Compute(ir.Unshard, 0, ir.None)} {
		if got := deps.Of(&p, &st, nil); len(got) != 0 {
			t.Errorf("%s: got %v, want nothing", st, got)
		}
	}
	for _, st := range []ir.Step{{Kind: ir.Backward, Stage: 5}, {Kind: ir.Forward, Stage: 5}, {Kind: ir.Forward, Stage: -1}, {Kind: ir.BackwardInput, Stage: 1}} {
		checkNeighbour(t, &p, &st, deps.Of(&p, &st, nil)) // outside the placement, or at its end
		for q := -1; q <= 2; q++ {
			checkRecvs(t, &p, &st, q, deps.Of(&p, &st, nil))
		}
	}
	got := deps.Of(&p, &ir.Step{Kind: ir.Backward, Stage: 5, Peer: ir.None, Slot: ir.None}, nil)
	if len(got) != 1 || got[0].What != deps.Saved || got[0].Rank != ir.None {
		t.Errorf("B on stage 5 of 2: got %+v, want only its saved activations, on no rank", got)
	}
	if s := strings.TrimSpace(deps.What(200).String()); s != "What(?)" {
		t.Errorf("What(200) = %q", s)
	}
}

// TestWAfterFullB is where the users of the model disagreed: the model says
// W consumes what its I kept; gen/verify refuses a W after a full B (an
// order error: B already computed the weight gradient, a W would add it
// twice), while gen/sim, which times any program it can, falls back to the
// B. verify is the judge of a program; sim's fallback only times it.
func TestWAfterFullB(t *testing.T) {
	p, err := ir.ParseText("rank 0: 0DATA_LOAD0 0F0 0B0 0W0 OPT_STEP")
	if err != nil {
		t.Fatal(err)
	}
	in := deps.Of(&p, &ir.Step{Kind: ir.BackwardWeight, Peer: ir.None, Slot: ir.None}, nil)
	if len(in) != 1 || in[0].What != deps.Kept || in[0].Kind != ir.BackwardInput {
		t.Fatalf("Of(W) = %+v, want what I kept", in)
	}
	_, err = verify.Check(p, verify.Options{})
	var ve *verify.Error
	if !errors.As(err, &ve) || ve.Code != verify.Order || ve.Index != 3 {
		t.Fatalf("verify: %v; want an order error at step 3 (the W)", err)
	}
	res, err := sim.Run(p, sim.Cost{F: []float64{1}, B: []float64{2}, I: []float64{1}, W: []float64{1}})
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	if b, w := res.Events[2], res.Events[3]; w.Start < b.End {
		t.Errorf("sim: W starts at %v, before its B ends (%v)", w.Start, b.End)
	}
}

// TestCounterpart: each transfer's partner, by hand, and back again.
func TestCounterpart(t *testing.T) {
	for _, tc := range []struct{ st, want string }{
		{"2SEND_F5", "3RECV_F5"},
		{"3RECV_F5", "2SEND_F5"},
		{"2SEND_B5", "1RECV_B5"},
		{"1RECV_B5", "2SEND_B5"},
		{"2DATA_SEND5", "3DATA_RECV5"},
		{"3DATA_RECV5", "2DATA_SEND5"},
		{"0MPIPE_FWD_SEND5", "0MPIPE_FWD_RECV5"},
		{"0MPIPE_FWD_RECV5", "0MPIPE_FWD_SEND5"},
		{"2F5", "2F5"}, // not a transfer: itself
	} {
		st, err := ir.ParseStep(tc.st)
		if err != nil {
			t.Fatal(err)
		}
		if got := deps.Counterpart(st).String(); got != tc.want {
			t.Errorf("Counterpart(%s) = %s, want %s", tc.st, got, tc.want)
		}
		k, ds := deps.CounterpartOf(st.Kind)
		if want, _ := ir.ParseStep(tc.want); tc.st != tc.want && (k != want.Kind || st.Stage+ds != want.Stage) || tc.st == tc.want && (k != ir.Invalid || ds != 0) {
			t.Errorf("CounterpartOf(%s) = %s, %+d; want the kind and stage offset of %s", st.Kind, k, ds, tc.want)
		}
	}
}

// TestConsumer: by hand on a 2-copy program, and as Neighbour's inverse on
// every compute step of it.
func TestConsumer(t *testing.T) {
	// Two copies of a 2-stage pipeline on 4 ranks: micros 0, 1 run stages
	// 0..1, micros 2, 3 stages 2..3.
	p := ir.Program{Placement: ir.Placement{NumRanks: 4, RankOf: []int{0, 1, 2, 3}}, Micro: 4, Copies: 2}
	for _, tc := range []struct {
		st   ir.Step
		want string // "" when nothing on another stage consumes it
		rank int
	}{
		{ir.Compute(ir.Forward, 0, 1), "1F1", 1},
		{ir.Compute(ir.Forward, 1, 1), "", ir.None}, // the end of micro 1's route
		{ir.Compute(ir.Forward, 2, 3), "3F3", 3},
		{ir.Compute(ir.BackwardInput, 3, 2), "2B2", 2},
		{ir.Compute(ir.Backward, 2, 2), "", ir.None}, // the start of micro 2's route
		{ir.Compute(ir.BackwardWeight, 1, 0), "", ir.None},
	} {
		c, q, ok := deps.Consumer(&p, tc.st)
		got := ""
		if ok {
			got = c.String()
		}
		if got != tc.want || q != tc.rank {
			t.Errorf("Consumer(%s) = %q on rank %d, want %q on rank %d", tc.st, got, q, tc.want, tc.rank)
		}
		if q2, ok2 := deps.ConsumerRank(&p, tc.st); q2 != tc.rank || ok2 != (tc.want != "") {
			t.Errorf("ConsumerRank(%s) = %d, %v, want %d, %v", tc.st, q2, ok2, tc.rank, tc.want != "")
		}
	}
	for s := range 4 {
		for m := range 4 {
			if !p.Runs(s, m) {
				continue
			}
			for _, k := range []ir.Kind{ir.Forward, ir.BackwardInput} {
				cs := ir.Compute(k, s, m)
				c, _, ok := deps.Consumer(&p, cs)
				if !ok {
					continue
				}
				c.Kind = k // Backward stands for B or I
				wantKind := ir.Forward
				if k != ir.Forward {
					wantKind = ir.Backward // B or I
				}
				if in, ok := deps.Neighbour(&p, &c); !ok || in.Stage != s || in.Micro != m || in.Kind != wantKind {
					t.Errorf("Neighbour(Consumer(%s) = %s) = %+v, not %s", cs, c, in, cs)
				}
			}
		}
	}
}
