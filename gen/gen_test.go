package gen

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// legalVirtuals returns the V values to try for a family.
func legalVirtuals(f schedules.Family) []int {
	if f.DefaultVirtual <= 1 {
		return []int{1}
	}
	switch f.Name {
	case "interleaved", "interleaved-zb", "looped-bfs":
		return []int{1, 2, 3, 4}
	}
	return []int{f.DefaultVirtual}
}

// TestEveryScheduleLowersAndVerifies is the property test over the grid the
// compiler-core issue names: P in 1..8, V in 1..4 (where legal), M in 1..3P.
// Each program is lowered, verified (deadlock-free under rendezvous), and each
// (stage, micro) has exactly one F and one backward.
func TestEveryScheduleLowersAndVerifies(t *testing.T) {
	checked, dual := 0, 0
	for _, f := range schedules.All() {
		if f.ComputeOnly != "" {
			continue // refused by Lower with its reason (TestComputeOnlyFamiliesRefused)
		}
		for P := 1; P <= 8; P++ {
			for _, V := range legalVirtuals(f) {
				for M := 1; M <= 3*P; M++ {
					cfg := ir.Config{Schedule: f.Name, Ranks: P, Virtual: V, Micro: M}
					if _, _, err := Build(cfg); err != nil {
						continue // a documented constraint (e.g. dualpipe needs even P)
					}
					res, err := Lower(cfg, Options{})
					if err != nil {
						t.Errorf("%s P=%d V=%d M=%d: %v", f.Name, P, V, M, err)
						continue
					}
					checkOnce(t, fmt.Sprintf("%s P=%d V=%d M=%d", f.Name, P, V, M), res.Program)
					checked++
					if f.Name == "dualpipe" {
						dual++
					}
				}
			}
		}
	}
	if checked < 1000 {
		t.Errorf("only %d configurations checked; the grid should give well over 1000", checked)
	}
	// dualpipe: even P ≤ 8, even M in 2P..3P (its two model copies, Copies = 2).
	if want := 2 + 3 + 4 + 5; dual != want {
		t.Errorf("%d dualpipe configurations checked, want %d", dual, want)
	}
}

// checkOnce asserts one F and one backward (B, or I and W) per (stage, micro)
// on the micro's route (ir.Program.Route), and none off it.
func checkOnce(t *testing.T, name string, p ir.Program) {
	t.Helper()
	S, M := p.Stages(), p.Micro
	f := make([]int, S*M)
	b := make([]int, S*M)
	i := make([]int, S*M)
	w := make([]int, S*M)
	for _, steps := range p.Ranks {
		for _, st := range steps {
			for _, c := range st.Computes() {
				k := c.Stage*M + c.Micro
				switch c.Kind {
				case ir.Forward:
					f[k]++
				case ir.Backward:
					b[k]++
				case ir.BackwardInput:
					i[k]++
				case ir.BackwardWeight:
					w[k]++
				}
			}
		}
	}
	for k := range f {
		if !p.Runs(k/M, k%M) {
			if f[k]+b[k]+i[k]+w[k] != 0 {
				t.Errorf("%s: stage %d micro %d is off the micro's route but has F×%d B×%d I×%d W×%d", name, k/M, k%M, f[k], b[k], i[k], w[k])
			}
			continue
		}
		full := b[k] == 1 && i[k] == 0 && w[k] == 0
		split := b[k] == 0 && i[k] == 1 && w[k] == 1
		if f[k] != 1 || !(full || split) {
			t.Errorf("%s: stage %d micro %d has F×%d B×%d I×%d W×%d", name, k/M, k%M, f[k], b[k], i[k], w[k])
		}
	}
}

// TestClassicBubbleFormula: GPipe and 1F1B at F=1, B=2 (comm 0) have a
// whole-iteration bubble of exactly (P-1)/(M+P-1) after lowering.
func TestClassicBubbleFormula(t *testing.T) {
	cost, err := sim.ParseCost("F=1,B=2", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gpipe", "1f1b"} {
		for P := 1; P <= 8; P++ {
			for M := 1; M <= 3*P; M++ {
				res, err := Lower(ir.Config{Schedule: name, Ranks: P, Micro: M}, Options{})
				if err != nil {
					t.Fatalf("%s P=%d M=%d: %v", name, P, M, err)
				}
				r, err := sim.Run(res.Program, cost)
				if err != nil {
					t.Fatalf("%s P=%d M=%d: sim: %v", name, P, M, err)
				}
				want := float64(P-1) / float64(M+P-1)
				if math.Abs(r.Bubble-want) > 1e-12 {
					t.Errorf("%s P=%d M=%d: bubble %.15f, want (P-1)/(M+P-1) = %.15f", name, P, M, r.Bubble, want)
				}
			}
		}
	}
}

// TestInterleavedBeatsOneFOneB: at equal P and M, V >= 2 and M >= P, the
// interleaved schedule's simulated makespan is below 1F1B's.
func TestInterleavedBeatsOneFOneB(t *testing.T) {
	for P := 2; P <= 8; P++ {
		for V := 2; V <= 4; V++ {
			for _, M := range []int{P, P + 1, 2 * P, 3 * P} {
				// Per-chunk costs: a full stage costs F=1, B=2 split over V chunks.
				one := makespan(t, ir.Config{Schedule: "1f1b", Ranks: P, Micro: M}, fmt.Sprintf("F=1,B=2"))
				inter := makespan(t, ir.Config{Schedule: "interleaved", Ranks: P, Virtual: V, Micro: M},
					fmt.Sprintf("F=%g,B=%g,W=%g", 1/float64(V), 2/float64(V), 1/float64(V)))
				if !(inter < one) {
					t.Errorf("P=%d V=%d M=%d: interleaved makespan %.4f, 1f1b %.4f", P, V, M, inter, one)
				}
			}
		}
	}
}

func makespan(t *testing.T, cfg ir.Config, cost string) float64 {
	t.Helper()
	res, err := Lower(cfg, Options{})
	if err != nil {
		t.Fatalf("%+v: %v", cfg, err)
	}
	c, err := sim.ParseCost(cost, res.Program.Stages())
	if err != nil {
		t.Fatal(err)
	}
	r, err := sim.Run(res.Program, c)
	if err != nil {
		t.Fatalf("%+v: %v", cfg, err)
	}
	return r.Makespan
}

// BenchmarkLower measures build + lowering + verification (what `ppgen
// verify` and `ppgen gen` do before emitting), per configuration.
func BenchmarkLower(b *testing.B) {
	for _, c := range []struct {
		schedule string
		P, V, M  int
	}{
		{"interleaved", 8, 2, 256}, {"interleaved", 16, 2, 256}, {"interleaved", 32, 2, 256}, {"interleaved", 64, 2, 256},
		{"zbv", 64, 2, 256},
	} {
		cfg := ir.Config{Schedule: c.schedule, Ranks: c.P, Virtual: c.V, Micro: c.M}
		b.Run(fmt.Sprintf("%s/P=%d/V=%d/M=%d", c.schedule, c.P, c.V, c.M), func(b *testing.B) {
			var steps int
			for b.Loop() {
				res, err := Lower(cfg, Options{})
				if err != nil {
					b.Fatal(err)
				}
				steps = res.Program.NumSteps()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(steps), "ns/step")
			b.ReportMetric(float64(steps), "steps")
		})
	}
}

// computeOnlyFamily is a family that only builds its compute order (the
// 1f1b order), registered once by TestComputeOnlyFamiliesRefused: no real
// family sets Family.ComputeOnly at the moment.
const computeOnlyFamily = "test-compute-only"

var registerComputeOnly sync.Once

// TestComputeOnlyFamiliesRefused: a family that can only build its compute
// order is refused by Lower with the family's reason, not with a verifier
// error.
func TestComputeOnlyFamiliesRefused(t *testing.T) {
	registerComputeOnly.Do(func() {
		oneF1B, err := schedules.Lookup("1f1b")
		if err != nil {
			t.Fatal(err)
		}
		schedules.Register(schedules.Family{Name: computeOnlyFamily, Summary: "test only", DefaultVirtual: 1,
			ComputeOnly: "a test of the compute-only mechanism", Build: oneF1B.Build})
	})
	seen := false
	for _, f := range schedules.All() {
		if f.ComputeOnly == "" {
			continue
		}
		_, err := Lower(ir.Config{Schedule: f.Name, Ranks: 4, Micro: 16}, Options{})
		if err == nil || !strings.Contains(err.Error(), "cannot be lowered yet") {
			t.Errorf("%s: Lower error = %v, want the compute-only refusal", f.Name, err)
		}
		if _, _, err := Build(ir.Config{Schedule: f.Name, Ranks: 4, Micro: 16}); err != nil {
			t.Errorf("%s: Build: %v", f.Name, err)
		}
		seen = seen || f.Name == computeOnlyFamily
	}
	if !seen {
		t.Errorf("the compute-only family %s was not checked", computeOnlyFamily)
	}
}

// scheduleOptions are the option sets of the compute-order passes the
// property tests run every family with: none, then split, overlap, overlap
// with dx/dw split, split with overlap, and dx/dw split alone (which needs a
// family with overlaps of its own; the others are refused).
var scheduleOptions = []passes.Options{
	{},
	{Split: true},
	{Overlap: true},
	{Overlap: true, DxDwInOverlap: true},
	{Split: true, Overlap: true},
	{DxDwInOverlap: true},
}

// TestLoweringKeepsIdealMakespan: the timed comm order adds no stall at
// comm = 0: every lowered program simulates in exactly the makespan of its
// compute-only order, for every family on a grid of P, V and M, and with each
// of scheduleOptions (the compute order is then the one the split and
// overlap passes made, the lowered program's compute steps).
func TestLoweringKeepsIdealMakespan(t *testing.T) {
	cost := sim.DefaultCost()
	for _, f := range schedules.All() {
		if f.ComputeOnly != "" {
			continue
		}
		for _, P := range []int{2, 3, 4, 8} {
			for _, V := range legalVirtuals(f) {
				for _, M := range []int{1, P, 2*P + 1, 4 * P} {
					for _, o := range scheduleOptions {
						cfg := ir.Config{Schedule: f.Name, Ranks: P, Virtual: V, Micro: M}
						_, compute, err := Build(cfg)
						if err != nil {
							continue
						}
						res, err := Lower(cfg, Options{Passes: o})
						if o.DxDwInOverlap && !o.Overlap && !hasOverlap(compute) {
							if err == nil || !strings.Contains(err.Error(), "dxdw-in-overlap") {
								t.Errorf("%+v: Lower error %v, want the dxdw-in-overlap refusal", cfg, err)
							}
							continue
						}
						if err != nil {
							t.Fatalf("%+v: %v", cfg, err)
						}
						name := fmt.Sprintf("%s P=%d V=%d M=%d split=%t overlap=%t dxdw=%t", f.Name, P, V, M, o.Split, o.Overlap, o.DxDwInOverlap)
						checkOnce(t, name, res.Program)
						ideal, err := sim.Run(res.Program.ComputeOnly(), cost)
						if err != nil {
							t.Fatalf("%s: compute-only sim: %v", name, err)
						}
						got, err := sim.Run(res.Program, cost)
						if err != nil {
							t.Fatalf("%s: sim: %v", name, err)
						}
						if math.Abs(got.Makespan-ideal.Makespan) > 1e-9 {
							t.Errorf("%s: lowered makespan %.4g, compute-only %.4g", name, got.Makespan, ideal.Makespan)
						}
					}
				}
			}
		}
	}
}

func hasOverlap(p ir.Program) bool {
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind.IsOverlap() {
				return true
			}
		}
	}
	return false
}

// TestParallelLoweringIsDeterministic: the per-rank work of the passes and
// the verifier runs on several goroutines for large programs; forced on for
// small ones, every lowered program and report equals the serial one, and an
// unsafe program gets the same diagnosis.
func TestParallelLoweringIsDeterministic(t *testing.T) {
	lowerAll := func() []string {
		var out []string
		for _, f := range schedules.All() {
			if f.ComputeOnly != "" {
				continue
			}
			for _, P := range []int{2, 3, 5, 8} {
				for _, V := range legalVirtuals(f) {
					for _, M := range []int{1, P, 2*P + 1} {
						cfg := ir.Config{Schedule: f.Name, Ranks: P, Virtual: V, Micro: M}
						if _, _, err := Build(cfg); err != nil {
							continue
						}
						res, err := Lower(cfg, Options{})
						if err != nil {
							t.Fatalf("%+v: %v", cfg, err)
						}
						out = append(out, fmt.Sprintf("%+v\n%s%v %v %v", cfg, ir.FormatText(res.Program), res.Info.Slots, res.Report.PeakActivations, res.Info.RecvDistances))
					}
				}
			}
		}
		// An unsafe program: the crossed rendezvous of 1F1B P=2 M=2.
		crossed, err := ir.ParseText("rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n")
		if err != nil {
			t.Fatal(err)
		}
		_, err = LowerProgram(crossed, Options{})
		return append(out, fmt.Sprint(err))
	}
	serial := lowerAll()
	old := par.MinSteps
	par.MinSteps = 0
	defer func() { par.MinSteps = old }()
	parallel := lowerAll()
	if len(serial) != len(parallel) {
		t.Fatalf("%d serial results, %d parallel", len(serial), len(parallel))
	}
	for i := range serial {
		if serial[i] != parallel[i] {
			t.Fatalf("parallel lowering differs from serial:\n%s\n--- parallel ---\n%s", serial[i], parallel[i])
		}
	}
}

// TestDualPipeEmits: dualpipe lowers with two model copies, and Emit
// writes them as Spec.Copies = 2 (the runtime then sums the copies'
// gradients at OPT_STEP); single-pipeline programs carry no Copies field.
func TestDualPipeEmits(t *testing.T) {
	cfg := ir.Config{Schedule: "dualpipe", Ranks: 4, Micro: 8}
	res, err := Lower(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Program.Copies != 2 {
		t.Fatalf("lowered dualpipe: Copies = %d, want 2", res.Program.Copies)
	}
	src, _, err := Generate(cfg, Options{}, emit.Options{Package: "sched"})
	if err != nil || !strings.Contains(string(src), "\tCopies:      2,\n") {
		t.Fatalf("Generate: error %v; source:\n%.1200s", err, src)
	}
	src, _, err = Generate(ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8}, Options{}, emit.Options{Package: "sched"})
	if err != nil || strings.Contains(string(src), "Copies") {
		t.Fatalf("1f1b: error %v; source:\n%.1200s", err, src)
	}
	three := res.Program
	three.Copies = 3
	if _, err := emit.Emit(three, emit.Options{Package: "sched"}); err == nil || !strings.Contains(err.Error(), "at most 2") {
		t.Errorf("Emit with 3 copies: %v", err)
	}
}

// TestEveryScheduleLowersWithFSDP: every lowerable family at a few sizes
// lowers with the FSDP pass at windows 1 to 3 (1 is refused only for an
// overlap of two stages) and verifies, with the peak of unsharded stages
// within the window.
func TestEveryScheduleLowersWithFSDP(t *testing.T) {
	checked := 0
	defer func() {
		if checked < 30 {
			t.Errorf("only %d configurations checked", checked)
		}
	}()
	for _, name := range schedules.Names() {
		for _, pm := range [][2]int{{2, 4}, {4, 8}} {
			cfg := ir.Config{Schedule: name, Ranks: pm[0], Micro: pm[1]}
			if _, err := Lower(cfg, Options{}); err != nil {
				continue // the family does not take this size
			}
			for window := 1; window <= 3; window++ {
				res, err := Lower(cfg, Options{Passes: passes.Options{FSDP: window}})
				if err != nil {
					if window == 1 && strings.Contains(err.Error(), "raise the window") {
						continue
					}
					t.Fatalf("%s P=%d M=%d window %d: %v", name, pm[0], pm[1], window, err)
				}
				checked++
				for r, peak := range res.Report.PeakUnsharded {
					if peak < 1 || peak > window {
						t.Errorf("%s P=%d M=%d window %d: rank %d holds %d stages unsharded", name, pm[0], pm[1], window, r, peak)
					}
				}
			}
		}
	}
}

// TestEveryScheduleLowersWithFSDPPrefetch is the property test of the FSDP
// look-ahead over the schedule families: every lowerable family at P in
// 1..4, its legal V and a few M lowers with -fsdp 1..2 and -fsdp-prefetch
// 0..2 and verifies (every compute runs unsharded), with the peak of
// unsharded stages within the window, a prefetched stage counted from its
// UNSHARD; some prefetch must change some program.
func TestEveryScheduleLowersWithFSDPPrefetch(t *testing.T) {
	checked, ahead := 0, 0
	for _, f := range schedules.All() {
		if f.ComputeOnly != "" {
			continue
		}
		for P := 1; P <= 4; P++ {
			for _, V := range legalVirtuals(f) {
				for _, M := range []int{1, P + 1, 2 * P} {
					cfg := ir.Config{Schedule: f.Name, Ranks: P, Virtual: V, Micro: M}
					if _, _, err := Build(cfg); err != nil {
						continue // a documented constraint
					}
					for window := 1; window <= 2; window++ {
						var base string
						for k := 0; k <= 2; k++ {
							name := fmt.Sprintf("%s P=%d V=%d M=%d -fsdp %d -fsdp-prefetch %d", f.Name, P, V, M, window, k)
							res, err := Lower(cfg, Options{Passes: passes.Options{FSDP: window, FSDPPrefetch: k}})
							if err != nil {
								if window == 1 && strings.Contains(err.Error(), "raise the window") {
									break // an overlap of two stages needs window 2
								}
								t.Fatalf("%s: %v", name, err)
							}
							checked++
							for r, peak := range res.Report.PeakUnsharded {
								if peak < 1 || peak > window {
									t.Errorf("%s: rank %d holds %d stages unsharded", name, r, peak)
								}
							}
							text := ir.FormatText(res.Program)
							switch {
							case k == 0:
								base = text
							case text != base:
								ahead++
							}
						}
					}
				}
			}
		}
	}
	if checked < 300 {
		t.Errorf("only %d configurations checked", checked)
	}
	if ahead == 0 {
		t.Error("prefetch never moved an UNSHARD")
	}
}

// TestFSDPPrefetchMakespan: simulated with the all-gather on its own
// stream, issuing UNSHARD a compute step ahead (-fsdp-prefetch 1) shortens
// the iteration where an all-gather sat on the critical path, and changes
// nothing when gathers are free. In 1F1B (one stage per rank) the only
// all-gather of a rank comes before its first compute: on ranks > 0 it
// already runs while the rank waits for its first activation, and rank 0's
// cannot start before time 0, so prefetch gains nothing there unless a
// host step (a data load) came before the UNSHARD.
func TestFSDPPrefetchMakespan(t *testing.T) {
	tests := []struct {
		schedule   string
		P, V, M    int
		cost       string
		prefetched string // how prefetch 1's makespan compares with prefetch 0's: "<" or "="
	}{
		{"interleaved", 4, 2, 8, "unshard=0.5", "<"},
		{"interleaved", 4, 2, 8, "unshard=0", "="},
		{"1f1b", 4, 1, 8, "unshard=0.5", "="},
		{"1f1b", 4, 1, 8, "unshard=0.5,data=0.5", "<"},
		{"1f1b", 4, 1, 8, "unshard=0", "="},
	}
	for _, tt := range tests {
		cfg := ir.Config{Schedule: tt.schedule, Ranks: tt.P, Virtual: tt.V, Micro: tt.M}
		var ms [2]float64
		for k := range ms {
			res, err := Lower(cfg, Options{Passes: passes.Options{FSDP: 2, FSDPPrefetch: k}})
			if err != nil {
				t.Fatalf("%+v prefetch %d: %v", cfg, k, err)
			}
			c, err := sim.ParseCost(tt.cost, res.Program.Stages())
			if err != nil {
				t.Fatal(err)
			}
			r, err := sim.Run(res.Program, c)
			if err != nil {
				t.Fatalf("%+v prefetch %d: %v", cfg, k, err)
			}
			ms[k] = r.Makespan
		}
		if got := map[bool]string{true: "<", false: "="}[ms[1] < ms[0]]; got != tt.prefetched || ms[1] > ms[0] {
			t.Errorf("%s P=%d V=%d M=%d -fsdp 2 -cost %s: makespan %g with prefetch 1, %g with prefetch 0; want %s", tt.schedule, tt.P, tt.V, tt.M, tt.cost, ms[1], ms[0], tt.prefetched)
		}
	}
}

// TestEveryScheduleLowersWithSwap: every lowerable family but mpipe (which
// refuses it) lowers with the swap pass (gaps 2 and 4) and verifies (each chunk's swap steps in order,
// its backward after its load), and swapping never raises a rank's peak of
// resident activations.
func TestEveryScheduleLowersWithSwap(t *testing.T) {
	checked := 0
	for _, name := range schedules.Names() {
		for _, pm := range [][2]int{{2, 4}, {4, 8}} {
			cfg := ir.Config{Schedule: name, Ranks: pm[0], Micro: pm[1]}
			plain, err := Lower(cfg, Options{})
			if err != nil {
				continue // the family does not take this size
			}
			for _, gap := range []int{2, 4} {
				res, err := Lower(cfg, Options{Passes: passes.Options{Swap: gap}})
				if f, _ := schedules.Lookup(name); f.OwnedData {
					// mpipe refuses swapping (TestMPipeRefusesSwap).
					if err == nil {
						t.Errorf("%s P=%d M=%d gap %d: lowered with -swap; want the refusal", name, pm[0], pm[1], gap)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s P=%d M=%d gap %d: %v", name, pm[0], pm[1], gap, err)
				}
				checked++
				for r, peak := range res.Report.PeakActivations {
					if peak > plain.Report.PeakActivations[r] {
						t.Errorf("%s P=%d M=%d gap %d: rank %d peak %d, %d without swapping", name, pm[0], pm[1], gap, r, peak, plain.Report.PeakActivations[r])
					}
				}
			}
		}
	}
	if checked < 30 {
		t.Errorf("only %d configurations checked", checked)
	}
	// gpipe keeps every forward live until the backwards: swapping lowers
	// its peak.
	cfg := ir.Config{Schedule: "gpipe", Ranks: 2, Micro: 8}
	plain, _ := Lower(cfg, Options{})
	res, err := Lower(cfg, Options{Passes: passes.Options{Swap: 2}})
	if err != nil || res.Report.PeakActivations[0] >= plain.Report.PeakActivations[0] {
		t.Errorf("gpipe P=2 M=8: peaks %v with swapping, %v without (%v)", res.Report.PeakActivations, plain.Report.PeakActivations, err)
	}
}

// TestInterleavedZBNeverSlowerLowered: interleaved-zb judges its candidates
// compute-only, so under a cost with latency its pick could run slower once
// lowered than PyTorch's order lowered the same way (issue 35: P = 4, V = 2,
// M = 4, comm = 0.2: 32 against 31.8, 4 of 336 configs). LowerFamily
// lowers the family's Reference too and keeps the faster: on every config
// here the result is never slower than PyTorch's order, lowered.
func TestInterleavedZBNeverSlowerLowered(t *testing.T) {
	fam, err := schedules.Lookup("interleaved-zb")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{2, 4} {
		for _, v := range []int{1, 2} {
			for _, m := range []int{4, 8} {
				for _, comm := range []float64{0, 0.2, 0.5} {
					name := fmt.Sprintf("P=%d V=%d M=%d comm=%g", p, v, m, comm)
					cost := sim.Cost{F: []float64{1}, B: []float64{2}, I: []float64{1}, W: []float64{1}, Comm: comm}
					opt := Options{CommCost: func(ir.Program) (sim.Cost, error) { return cost, nil }}
					cfg := ir.Config{Schedule: "interleaved-zb", Ranks: p, Virtual: v, Micro: m,
						Cost: &ir.Costs{F: []float64{1}, I: []float64{1}, W: []float64{1}, Comm: comm}}
					res, err := LowerFamily(fam, cfg, opt)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					ref, err := fam.Reference(res.Config)
					if err != nil {
						t.Fatalf("%s: reference: %v", name, err)
					}
					alt, err := LowerOrder(res.Config, ref, opt)
					if err != nil {
						t.Fatalf("%s: PyTorch's order: %v", name, err)
					}
					got, err1 := sim.Run(res.Program, cost)
					want, err2 := sim.Run(alt.Program, cost)
					if err1 != nil || err2 != nil {
						t.Fatalf("%s: %v, %v", name, err1, err2)
					}
					if got.Makespan > want.Makespan+1e-9 {
						t.Errorf("%s: %v lowered, PyTorch's order %v", name, got.Makespan, want.Makespan)
					}
					if p == 4 && v == 2 && m == 4 && comm == 0.2 && math.Abs(got.Makespan-31.8) > 1e-9 {
						t.Errorf("%s: %v; the reviewed case ran in 31.8 as PyTorch's order", name, got.Makespan)
					}
				}
			}
		}
	}
}
