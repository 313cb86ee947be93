package schedules

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

// izbtTorchOrder is PyTorch's ScheduleInterleavedZeroBubble order
// (torch.distributed.pipelining, ZB1P on the loop placement) for M a
// multiple of its number of rounds, written here from its description:
// rounds = max(1, M div P) of M/rounds micro-batches each; rank r runs
// w = min(V·M, (V-1)·(M/rounds) + P-1-r) forwards, then a forward and an
// input-gradient backward I alternating, then the remaining I's. The k-th
// forward is of local stage (k div (M/rounds)) mod V, the j-th I of local
// stage V-1 - ((j div (M/rounds)) mod V), each stage's micro-batches in
// ascending order. The j-th I is followed by a weight-gradient step W once
// j ≥ r (the oldest W not run yet), so rank r defers r W's, which run at
// its end. The bubbles PyTorch inserts between actions change no order.
func izbtTorchOrder(p, v, m int) ir.Program {
	rounds := max(1, m/p)
	per := m / rounds
	prog := ir.NewProgram(ir.Loop(p, v), m)
	for r := 0; r < p; r++ {
		n := v * m
		w := min((v-1)*per+(p-1-r), n)
		nextF, nextI := make([]int, v), make([]int, v)
		var order, deferred []ir.Step
		forward := func(k int) {
			c := (k / per) % v
			order = append(order, ir.Compute(ir.Forward, c*p+r, nextF[c]))
			nextF[c]++
		}
		backward := func(j int) {
			c := v - 1 - (j/per)%v
			order = append(order, ir.Compute(ir.BackwardInput, c*p+r, nextI[c]))
			deferred = append(deferred, ir.Compute(ir.BackwardWeight, c*p+r, nextI[c]))
			nextI[c]++
			if j >= r {
				order = append(order, deferred[0])
				deferred = deferred[1:]
			}
		}
		for k := 0; k < w; k++ {
			forward(k)
		}
		for k := w; k < n; k++ {
			forward(k)
			backward(k - w)
		}
		for j := n - w; j < n; j++ {
			backward(j)
		}
		prog.Ranks[r] = append(order, deferred...)
	}
	return prog
}

// izbtReplaced is the order interleaved-zb replaced: interleaved's default
// order with every B an I, the W's placed by zbFill (unit time) up to
// interleaved's own peak.
func izbtReplaced(t *testing.T, p, v, m int) ir.Program {
	t.Helper()
	base := zbtBuild(t, "interleaved", p, v, m, ir.Options{})
	limit := 0
	skel := make([][]ir.Step, p)
	for r, steps := range base.Ranks {
		live := 0
		for _, st := range steps {
			if st.Kind == ir.Forward {
				live++
				limit = max(limit, live)
				skel[r] = append(skel[r], st)
				continue
			}
			live--
			skel[r] = append(skel[r], ir.Compute(ir.BackwardInput, st.Stage, st.Micro))
		}
	}
	ranks, err := zbFill(base.Placement, m, skel, limit)
	if err != nil {
		t.Fatal(err)
	}
	return ir.Program{Placement: base.Placement, Micro: m, Ranks: ranks}
}

// izbtCost is a cost model of F, I, W on every stage and comm.
type izbtCost struct{ f, i, w, comm float64 }

func (c izbtCost) String() string {
	return fmt.Sprintf("F=%g,I=%g,W=%g,comm=%g", c.f, c.i, c.w, c.comm)
}

func (c izbtCost) sim() sim.Cost {
	return sim.Cost{F: []float64{c.f}, I: []float64{c.i}, W: []float64{c.w}, B: []float64{c.i + c.w}, Comm: c.comm}
}

func (c izbtCost) ir() *ir.Costs {
	return &ir.Costs{F: []float64{c.f}, I: []float64{c.i}, W: []float64{c.w}, Comm: c.comm}
}

// izbtRun simulates a compute-only program under c: its makespan and the
// simulator's peak of live chunks per rank.
func izbtRun(t *testing.T, prog ir.Program, c izbtCost) (float64, []int) {
	t.Helper()
	res, err := sim.Run(prog, c.sim())
	if err != nil {
		t.Fatalf("simulating under %v: %v", c, err)
	}
	return res.Makespan, res.PeakActivations
}

func izbtBuild(t *testing.T, p, v, m int, opts ir.Options, c *ir.Costs) ir.Program {
	t.Helper()
	prog, err := Build(ir.Config{Schedule: "interleaved-zb", Ranks: p, Virtual: v, Micro: m, Options: opts, Cost: c})
	if err != nil {
		t.Fatalf("interleaved-zb P=%d V=%d M=%d: %v", p, v, m, err)
	}
	if err := zbtCheck(prog, zbtAllStages(prog)); err != nil {
		t.Fatalf("interleaved-zb P=%d V=%d M=%d: %v", p, v, m, err)
	}
	if _, err := verify.Check(prog, verify.Options{}); err != nil {
		t.Fatalf("interleaved-zb P=%d V=%d M=%d: verify: %v", p, v, m, err)
	}
	return prog
}

func izbtMax(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

const izbtEps = 1e-9

// TestInterleavedZBAgainstPyTorch is issue 14's item 4: on P ∈ {4, 8},
// V = 2, M ∈ {P, 2P}, at F = I = W = 1 and at F = 1, I = 0.5, W = 1.5 (the
// cost of each stage, as `ppgen sim -schedule` takes -cost), interleaved-zb
// built for the cost holds no more live chunks than PyTorch's order on any
// rank and is no slower than it nor than the order it replaced.
//
// The reference figures are the reference's own, and checked by hand:
// PyTorch's order runs in (P-1)·F + V·M·(F+I+W), which no order beats (the
// last rank waits P-1 forwards for its first input, then has V·M chunks of
// F, I and W to run), and holds V·P chunks on every rank.
func TestInterleavedZBAgainstPyTorch(t *testing.T) {
	const v = 2
	for _, p := range []int{4, 8} {
		for _, m := range []int{p, 2 * p} {
			for _, c := range []izbtCost{{1, 1, 1, 0}, {1, 0.5, 1.5, 0}} {
				name := fmt.Sprintf("P=%d M=%d %v", p, m, c)
				refSpan, refPeak := izbtRun(t, izbtTorchOrder(p, v, m), c)
				if want := float64(p-1)*c.f + float64(v*m)*(c.f+c.i+c.w); math.Abs(refSpan-want) > izbtEps {
					t.Fatalf("%s: PyTorch's order runs in %v, want (P-1)·F + V·M·(F+I+W) = %v (the reference is wrong)", name, refSpan, want)
				}
				for r, pk := range refPeak {
					if pk != v*p {
						t.Fatalf("%s: PyTorch's order holds %d chunks on rank %d, want V·P = %d (the reference is wrong)", name, pk, r, v*p)
					}
				}
				oldSpan, oldPeak := izbtRun(t, izbtReplaced(t, p, v, m), c)
				span, peak := izbtRun(t, izbtBuild(t, p, v, m, ir.Options{}, c.ir()), c)
				for r := range peak {
					if peak[r] > refPeak[r] {
						t.Errorf("%s: rank %d holds %d chunks, PyTorch's order %d", name, r, peak[r], refPeak[r])
					}
				}
				if span > refSpan+izbtEps {
					t.Errorf("%s: makespan %v, PyTorch's order %v", name, span, refSpan)
				}
				if span > oldSpan+izbtEps {
					t.Errorf("%s: makespan %v, the order it replaced %v", name, span, oldSpan)
				}
				t.Logf("%-32s PyTorch %6.5g / %2d   replaced %6.5g / %2d   interleaved-zb %6.5g / %2d", name, refSpan, izbtMax(refPeak), oldSpan, izbtMax(oldPeak), span, izbtMax(peak))
			}
		}
	}
}

// TestInterleavedZBUsesCost: the order depends on the cost model where
// that pays. Under comm latency PyTorch's warm-up leaves no forward to
// cover a gradient's round trip; built for the cost, interleaved-zb is
// faster than PyTorch's order and than itself built for unit costs, and
// with less-memory it is faster than PyTorch's order at its memory.
func TestInterleavedZBUsesCost(t *testing.T) {
	const v = 2
	for _, tc := range []struct {
		p, m int
		c    izbtCost
	}{
		{4, 4, izbtCost{1, 1, 1, 0.2}},
		{8, 8, izbtCost{1, 1.25, 0.75, 0.2}},
		{3, 3, izbtCost{1, 1, 1, 0.5}},
	} {
		name := fmt.Sprintf("P=%d M=%d %v", tc.p, tc.m, tc.c)
		refSpan, refPeak := izbtRun(t, izbtTorchOrder(tc.p, v, tc.m), tc.c)
		unit, _ := izbtRun(t, izbtBuild(t, tc.p, v, tc.m, ir.Options{}, nil), tc.c)
		span, _ := izbtRun(t, izbtBuild(t, tc.p, v, tc.m, ir.Options{}, tc.c.ir()), tc.c)
		if !(span < refSpan-izbtEps && span < unit-izbtEps) {
			t.Errorf("%s: makespan %v built for the cost; want below PyTorch's %v and the unit-cost order's %v", name, span, refSpan, unit)
		}
		less, peak := izbtRun(t, izbtBuild(t, tc.p, v, tc.m, ir.Options{LessMemory: true}, tc.c.ir()), tc.c)
		if !(less < refSpan-izbtEps) || izbtMax(peak) > izbtMax(refPeak) {
			t.Errorf("%s: less-memory makespan %v at %d chunks; want below PyTorch's %v at no more than its %d", name, less, izbtMax(peak), refSpan, izbtMax(refPeak))
		}
	}
}

// TestInterleavedZBNeverSlower: built for the cost, interleaved-zb is never
// slower than the order it replaced nor than PyTorch's (where PyTorch takes
// M), over P ≤ 8, V ≤ 3, M up to 2P+1 and costs with and without latency;
// where it is as fast as PyTorch's order it holds no more chunks.
func TestInterleavedZBNeverSlower(t *testing.T) {
	costs := []izbtCost{{1, 1, 1, 0}, {1, 0.5, 1.5, 0}, {1, 1.25, 0.75, 0}, {1, 1, 1, 0.3}, {2, 1, 0.5, 0.5}}
	for _, p := range []int{1, 2, 3, 4, 8} {
		for _, v := range []int{1, 2, 3} {
			for _, m := range []int{1, p - 1, p, p + 1, 2 * p, 2*p + 1} {
				if m < 1 {
					continue
				}
				torch := m%max(1, m/p) == 0
				for _, c := range costs {
					name := fmt.Sprintf("P=%d V=%d M=%d %v", p, v, m, c)
					prog := izbtBuild(t, p, v, m, ir.Options{}, c.ir())
					span, peak := izbtRun(t, prog, c)
					old, _ := izbtRun(t, izbtReplaced(t, p, v, m), c)
					if span > old+izbtEps*max(1, old) {
						t.Errorf("%s: makespan %v, the order it replaced %v", name, span, old)
					}
					// The bound the build stops at is one: below every order.
					if lb := izbLowerBound(prog.Placement, m, c.sim()); lb > min(span, old)+izbtEps*max(1, lb) {
						t.Errorf("%s: lower bound %v over a makespan (%v, %v)", name, lb, span, old)
					}
					if !torch {
						continue
					}
					ref, refPeak := izbtRun(t, izbtTorchOrder(p, v, m), c)
					if span > ref+izbtEps*max(1, ref) {
						t.Errorf("%s: makespan %v, PyTorch's order %v", name, span, ref)
					}
					if span >= ref-izbtEps*max(1, ref) && izbtMax(peak) > izbtMax(refPeak) {
						t.Errorf("%s: as fast as PyTorch's order (%v) at %d chunks, PyTorch's %d", name, span, izbtMax(peak), izbtMax(refPeak))
					}
				}
			}
		}
	}
}

// TestInterleavedZBMemory: over P ≤ 8, V ≤ 3 and M up to 3P+1, with
// less-memory no rank holds more than L = min(V·M, (V-1)·G₀ + P) chunks
// (V·P for M a multiple of P: PyTorch's), and by default none more than
// interleaved's H = min(V·M, (V-1)·G₀ + 2P-1), under unit costs and under a
// cost with latency alike (min(M, P) both for V = 1). G₀ is the first
// group's size: M for M < P, else P plus its share of the M mod P
// left-over micro-batches.
func TestInterleavedZBMemory(t *testing.T) {
	costs := []izbtCost{{1, 1, 1, 0}, {1, 0.5, 1.5, 0.25}}
	for _, p := range []int{1, 2, 3, 4, 8} {
		for _, v := range []int{1, 2, 3} {
			for _, m := range []int{1, p - 1, p, p + 1, 2 * p, 3*p + 1} {
				if m < 1 {
					continue
				}
				g0 := m
				if m >= p {
					n := m / p
					g0 = p + (m%p)/n
					if (m%p)%n > 0 {
						g0++
					}
				}
				for _, less := range []bool{false, true} {
					want := min(v*m, (v-1)*g0+2*p-1)
					if less {
						want = min(v*m, (v-1)*g0+p)
					}
					if v == 1 {
						want = min(m, p)
					}
					for _, c := range costs {
						_, peak := izbtRun(t, izbtBuild(t, p, v, m, ir.Options{LessMemory: less}, c.ir()), c)
						if got := izbtMax(peak); got > want {
							t.Errorf("P=%d V=%d M=%d less-memory=%v %v: %d chunks on a rank, want at most %d", p, v, m, less, c, got, want)
						}
					}
				}
			}
		}
	}
}

// TestInterleavedZBDeterministic: the same config builds the same order.
func TestInterleavedZBDeterministic(t *testing.T) {
	c := izbtCost{1, 0.5, 1.5, 0.1}.ir()
	a := ir.FormatText(izbtBuild(t, 4, 2, 8, ir.Options{}, c))
	b := ir.FormatText(izbtBuild(t, 4, 2, 8, ir.Options{}, c))
	if a != b {
		t.Errorf("two builds differ:\n%s\n%s", a, b)
	}
}

// TestInterleavedZBCostErrors: a cost model the simulator rejects is an
// error that names it, never a panic.
func TestInterleavedZBCostErrors(t *testing.T) {
	for _, c := range []*ir.Costs{
		{F: []float64{-1}},
		{I: []float64{math.NaN()}},
		{W: []float64{1, 2, 3}}, // 8 stages
		{Comm: math.Inf(1)},
		{F: []float64{}},
	} {
		_, err := Build(ir.Config{Schedule: "interleaved-zb", Ranks: 4, Virtual: 2, Micro: 4, Cost: c})
		if err == nil {
			t.Errorf("cost %+v: no error", *c)
			continue
		}
		t.Logf("cost %+v: %v", *c, err)
	}
}

// TestInterleavedZBReference: the family's Reference (which gen.LowerFamily
// lowers beside the family's own order) is PyTorch's order as written here
// from its description, for M a multiple of its rounds.
func TestInterleavedZBReference(t *testing.T) {
	fam, err := Lookup("interleaved-zb")
	if err != nil || fam.Reference == nil {
		t.Fatalf("interleaved-zb: %v, Reference %v", err, fam.Reference != nil)
	}
	for _, c := range []struct{ p, v, m int }{{2, 1, 4}, {4, 2, 4}, {4, 2, 8}, {4, 3, 12}, {8, 2, 16}} {
		got, err := fam.Reference(ir.Config{Schedule: "interleaved-zb", Ranks: c.p, Virtual: c.v, Micro: c.m})
		if err != nil {
			t.Fatalf("P=%d V=%d M=%d: %v", c.p, c.v, c.m, err)
		}
		want := izbtTorchOrder(c.p, c.v, c.m)
		for r := range want.Ranks {
			if !slices.EqualFunc(got.Ranks[r], want.Ranks[r], ir.Step.Equal) {
				t.Fatalf("P=%d V=%d M=%d rank %d:\n got %v\nwant %v", c.p, c.v, c.m, r, got.Ranks[r], want.Ranks[r])
			}
		}
	}
}
