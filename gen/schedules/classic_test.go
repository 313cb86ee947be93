package schedules

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// Tests of the classic families: gpipe, 1f1b, interleaved, looped-bfs.
// Helpers carry a "classic" prefix so they cannot collide with other
// families' test helpers in this package.

// classicCase is one configuration of the test grid.
type classicCase struct {
	family     string
	p, v, m    int
	lessMemory bool
}

func (c classicCase) String() string {
	s := fmt.Sprintf("%s/P%d/V%d/M%d", c.family, c.p, c.v, c.m)
	if c.lessMemory {
		s += "/less-memory"
	}
	return s
}

func (c classicCase) config() ir.Config {
	return ir.Config{Schedule: c.family, Ranks: c.p, Virtual: c.v, Micro: c.m,
		Options: ir.Options{LessMemory: c.lessMemory}}
}

// classicGrid returns every legal configuration with P in 1..8, V in 1..4 and
// M in 1..3P: gpipe and 1f1b only with V = 1, interleaved with and without
// less-memory.
func classicGrid() []classicCase {
	var cases []classicCase
	for p := 1; p <= 8; p++ {
		for v := 1; v <= 4; v++ {
			for m := 1; m <= 3*p; m++ {
				if v == 1 {
					cases = append(cases, classicCase{"gpipe", p, v, m, false}, classicCase{"1f1b", p, v, m, false})
				}
				cases = append(cases,
					classicCase{"interleaved", p, v, m, false},
					classicCase{"interleaved", p, v, m, true},
					classicCase{"looped-bfs", p, v, m, false})
			}
		}
	}
	return cases
}

func classicBuild(t *testing.T, c classicCase) ir.Program {
	t.Helper()
	prog, err := Build(c.config())
	if err != nil {
		t.Fatalf("%v: Build: %v", c, err)
	}
	return prog
}

// classicCheckShape checks that the program is compute-only and complete:
// loop placement for P·V stages, M micro-batches, every step an F or a B on a
// stage of the rank that runs it, and exactly one F and one B per (stage, micro).
func classicCheckShape(prog ir.Program, p, v, m int) error {
	want := ir.Loop(p, v)
	if prog.Placement.Name != "loop" || prog.Placement.NumRanks != p || !slices.Equal(prog.Placement.RankOf, want.RankOf) {
		return fmt.Errorf("placement %v over %d ranks, want loop for P=%d V=%d", prog.Placement.RankOf, prog.Placement.NumRanks, p, v)
	}
	if prog.Micro != m {
		return fmt.Errorf("Micro = %d, want %d", prog.Micro, m)
	}
	if len(prog.Ranks) != p {
		return fmt.Errorf("%d rank lists, want %d", len(prog.Ranks), p)
	}
	stages := p * v
	nf := make([]int, stages*m)
	nb := make([]int, stages*m)
	for r, steps := range prog.Ranks {
		for i, st := range steps {
			if st.Kind != ir.Forward && st.Kind != ir.Backward {
				return fmt.Errorf("rank %d step %d %v: kind %v, want only F and B", r, i, st, st.Kind)
			}
			if st.Peer != ir.None || st.Slot != ir.None || st.Sub != nil {
				return fmt.Errorf("rank %d step %d %v: peer %d slot %d sub %v, want none", r, i, st, st.Peer, st.Slot, st.Sub)
			}
			if st.Stage < 0 || st.Stage >= stages || st.Micro < 0 || st.Micro >= m {
				return fmt.Errorf("rank %d step %d %v: out of range (stages 0..%d, micro 0..%d)", r, i, st, stages-1, m-1)
			}
			if owner := prog.Placement.Rank(st.Stage); owner != r {
				return fmt.Errorf("rank %d step %d %v: stage %d lives on rank %d", r, i, st, st.Stage, owner)
			}
			if st.Kind == ir.Forward {
				nf[st.Stage*m+st.Micro]++
			} else {
				nb[st.Stage*m+st.Micro]++
			}
		}
	}
	for s := 0; s < stages; s++ {
		for mb := 0; mb < m; mb++ {
			if nf[s*m+mb] != 1 || nb[s*m+mb] != 1 {
				return fmt.Errorf("stage %d micro %d: %d F and %d B, want one of each", s, mb, nf[s*m+mb], nb[s*m+mb])
			}
		}
	}
	return nil
}

// classicSim runs a compute-only program: every rank executes its list in
// order, a step starts once the rank is free and its dependencies are done
// (F(s,m) after F(s-1,m); B(s,m) after F(s,m) and B(s+1,m)), and takes
// cost(step) time units; there is no communication cost. It reports the
// makespan and, per rank, the peak number of live chunks (forwarded, not yet
// backwarded). It returns an error naming the blocked steps when the ranks
// stop before finishing, which is what infeasibility (a dependency cycle)
// looks like. With cost 0 it is a pure feasibility check.
func classicSim(prog ir.Program, cost func(ir.Step) int) (makespan int, peak []int, err error) {
	stages, m := prog.Stages(), prog.Micro
	fEnd := make([]int, stages*m)
	bEnd := make([]int, stages*m)
	for i := range fEnd {
		fEnd[i], bEnd[i] = -1, -1
	}
	next := make([]int, len(prog.Ranks))
	free := make([]int, len(prog.Ranks))
	live := make([]int, len(prog.Ranks))
	peak = make([]int, len(prog.Ranks))
	for progress := true; progress; {
		progress = false
		for r, steps := range prog.Ranks {
			for next[r] < len(steps) {
				st := steps[next[r]]
				id := st.Stage*m + st.Micro
				ready, ok := 0, true
				if st.Kind == ir.Forward && st.Stage > 0 {
					ready, ok = fEnd[id-m], fEnd[id-m] >= 0
				}
				if st.Kind == ir.Backward {
					ready, ok = fEnd[id], fEnd[id] >= 0
					if st.Stage < stages-1 {
						ready, ok = max(ready, bEnd[id+m]), ok && bEnd[id+m] >= 0
					}
				}
				if !ok {
					break
				}
				end := max(free[r], ready) + cost(st)
				free[r] = end
				if st.Kind == ir.Forward {
					fEnd[id] = end
					live[r]++
					peak[r] = max(peak[r], live[r])
				} else {
					bEnd[id] = end
					live[r]--
				}
				makespan = max(makespan, end)
				next[r]++
				progress = true
			}
		}
	}
	var stuck []string
	for r, steps := range prog.Ranks {
		if next[r] < len(steps) {
			stuck = append(stuck, fmt.Sprintf("rank %d at step %d %v", r, next[r], steps[next[r]]))
		}
	}
	if stuck != nil {
		return 0, nil, fmt.Errorf("not feasible, ranks blocked: %s", strings.Join(stuck, "; "))
	}
	return makespan, peak, nil
}

func classicZeroCost(ir.Step) int { return 0 }

// TestClassicFeasible builds every family over the grid and checks the shape
// of the program and that running each rank's order in turn completes.
func TestClassicFeasible(t *testing.T) {
	for _, c := range classicGrid() {
		prog := classicBuild(t, c)
		if err := classicCheckShape(prog, c.p, c.v, c.m); err != nil {
			t.Errorf("%v: %v", c, err)
			continue
		}
		if _, _, err := classicSim(prog, classicZeroCost); err != nil {
			t.Errorf("%v: %v\n%s", c, err, ir.FormatText(prog))
		}
	}
}

// TestClassicFeasibleLarger spot-checks the interleaved orders past the main
// grid: long runs, M just past a multiple of P, and many stages per rank.
func TestClassicFeasibleLarger(t *testing.T) {
	for _, c := range []classicCase{
		{"interleaved", 16, 2, 33, false}, {"interleaved", 16, 3, 47, true}, {"interleaved", 12, 5, 100, false},
		{"interleaved", 8, 8, 17, false}, {"interleaved", 8, 8, 7, true}, {"interleaved", 3, 6, 64, false},
		{"interleaved", 10, 4, 1, false}, {"looped-bfs", 16, 3, 40, false}, {"1f1b", 32, 1, 5, false},
	} {
		prog := classicBuild(t, c)
		if err := classicCheckShape(prog, c.p, c.v, c.m); err != nil {
			t.Errorf("%v: %v", c, err)
			continue
		}
		if _, _, err := classicSim(prog, classicZeroCost); err != nil {
			t.Errorf("%v: %v", c, err)
		}
	}
}

// classicText renders per-rank action lists in FormatText's form.
func classicText(ranks [][]string) string {
	var b strings.Builder
	for r, acts := range ranks {
		fmt.Fprintf(&b, "rank %d:", r)
		for _, a := range acts {
			b.WriteString(" " + a)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// classicTorchGPipe is ScheduleGPipe's per-rank order: the forward loop over
// the micro-batches, then the backward loop over them.
func classicTorchGPipe(p, m int) string {
	ranks := make([][]string, p)
	for stage := range ranks {
		for i := range m {
			ranks[stage] = append(ranks[stage], fmt.Sprintf("%dF%d", stage, i))
		}
		for i := range m {
			ranks[stage] = append(ranks[stage], fmt.Sprintf("%dB%d", stage, i))
		}
	}
	return classicText(ranks)
}

// classicTorch1F1B follows Schedule1F1B._step_microbatches: warm-up of
// min(M, P - stage) forwards, then a "1B1F" loop that runs a backward, stops
// once every forward has run, and otherwise runs the next forward; then the
// cool-down backwards.
func classicTorch1F1B(p, m int) string {
	ranks := make([][]string, p)
	for stage := range ranks {
		var acts []string
		warmup := min(m, p-stage)
		fwdIdx, bwdIdx := 0, 0
		for range warmup {
			acts = append(acts, fmt.Sprintf("%dF%d", stage, fwdIdx))
			fwdIdx++
		}
		for {
			acts = append(acts, fmt.Sprintf("%dB%d", stage, bwdIdx))
			bwdIdx++
			if fwdIdx == m {
				break
			}
			acts = append(acts, fmt.Sprintf("%dF%d", stage, fwdIdx))
			fwdIdx++
		}
		for bwdIdx < m {
			acts = append(acts, fmt.Sprintf("%dB%d", stage, bwdIdx))
			bwdIdx++
		}
		ranks[stage] = acts
	}
	return classicText(ranks)
}

// classicRoundOps is the op-index shape of PyTorch's ScheduleInterleaved1F1B
// (_calculate_single_rank_operations with _get_1f1b_rank_ops) and
// hyper-parallel's: rounds of micro-batches, forward_stage_index and
// backward_stage_index from the op index, a per-stage micro-batch counter,
// warm-up (V-1)·round[0] + 2·(P-1-rank) capped at V·M. Compute actions only.
func classicRoundOps(p, v, m int, rounds []int, rank int) []string {
	accu := []int{0}
	for _, n := range rounds {
		accu = append(accu, accu[len(accu)-1]+n*v)
	}
	local := func(op int) int {
		i := 0
		for i+1 < len(accu) && accu[i+1] <= op {
			i++
		}
		return (op - accu[i]) / rounds[i]
	}
	warmup := min((v-1)*rounds[0]+2*(p-1-rank), m*v)
	fwdMB := map[int]int{}
	bwdMB := map[int]int{}
	var acts []string
	f := func(op int) {
		s := local(op)*p + rank
		acts = append(acts, fmt.Sprintf("%dF%d", s, fwdMB[s]))
		fwdMB[s]++
	}
	b := func(op int) {
		s := (v-1-local(op-warmup))*p + rank
		acts = append(acts, fmt.Sprintf("%dB%d", s, bwdMB[s]))
		bwdMB[s]++
	}
	for op := 0; op < m*v+warmup; op++ {
		switch {
		case op < warmup:
			f(op)
		case op < m*v:
			f(op)
			b(op)
		default:
			b(op)
		}
	}
	return acts
}

// classicTorchInterleaved is PyTorch's ScheduleInterleaved1F1B order: rounds
// = max(1, M div P) rounds of M/rounds micro-batches each. ok is false where
// PyTorch rejects M (M not a multiple of the number of rounds).
func classicTorchInterleaved(p, v, m int) (text string, ok bool) {
	n := max(1, m/p)
	if m%n != 0 {
		return "", false
	}
	rounds := make([]int, n)
	for i := range rounds {
		rounds[i] = m / n
	}
	ranks := make([][]string, p)
	for r := range ranks {
		ranks[r] = classicRoundOps(p, v, m, rounds, r)
	}
	return classicText(ranks), true
}

// classicHyperInterleaved is hyper-parallel's ScheduleInterleaved1F1B compute
// order (bubbles dropped): max(1, M div P) rounds of P + base micro-batches,
// the first M mod P mod rounds ones taking one more; one round of M when M < P.
func classicHyperInterleaved(p, v, m int) string {
	n := max(1, m/p)
	base, rem := m-p, 0
	if m >= p {
		base, rem = (m%p)/n, (m%p)%n
	}
	rounds := make([]int, n)
	for i := range rounds {
		rounds[i] = p + base
		if i < rem {
			rounds[i]++
		}
	}
	ranks := make([][]string, p)
	for r := range ranks {
		ranks[r] = classicRoundOps(p, v, m, rounds, r)
	}
	return classicText(ranks)
}

// classicTorchLoopedBFS follows ScheduleLoopedBFS: forwards stage by stage in
// ascending order, then backwards stage by stage and micro-batch by
// micro-batch, both reversed.
func classicTorchLoopedBFS(p, v, m int) string {
	ranks := make([][]string, p)
	for r := range ranks {
		var stages []int
		for s := r; s < p*v; s += p {
			stages = append(stages, s)
		}
		for _, s := range stages {
			for i := range m {
				ranks[r] = append(ranks[r], fmt.Sprintf("%dF%d", s, i))
			}
		}
		for _, s := range slices.Backward(stages) {
			for i := m - 1; i >= 0; i-- {
				ranks[r] = append(ranks[r], fmt.Sprintf("%dB%d", s, i))
			}
		}
	}
	return classicText(ranks)
}

// TestClassicMatchesReferences compares each family's order with the
// reference algorithm, rewritten above from the libraries' documented
// behaviour: gpipe, 1f1b and looped-bfs with PyTorch over the whole grid;
// interleaved with hyper-parallel for every M and V ≥ 2, with PyTorch where
// PyTorch accepts M, and with 1f1b for V = 1.
func TestClassicMatchesReferences(t *testing.T) {
	torchChecked := 0
	for _, c := range classicGrid() {
		got := ir.FormatText(classicBuild(t, c))
		var want, ref string
		switch {
		case c.family == "gpipe":
			want, ref = classicTorchGPipe(c.p, c.m), "PyTorch ScheduleGPipe"
		case c.family == "1f1b":
			want, ref = classicTorch1F1B(c.p, c.m), "PyTorch Schedule1F1B"
		case c.family == "looped-bfs":
			want, ref = classicTorchLoopedBFS(c.p, c.v, c.m), "PyTorch ScheduleLoopedBFS"
		case c.family == "interleaved" && c.v == 1:
			want, ref = classicTorch1F1B(c.p, c.m), "1f1b (interleaved with V = 1)"
		case c.family == "interleaved" && !c.lessMemory:
			want, ref = classicHyperInterleaved(c.p, c.v, c.m), "hyper-parallel ScheduleInterleaved1F1B"
			if torch, ok := classicTorchInterleaved(c.p, c.v, c.m); ok {
				torchChecked++
				if torch != got {
					t.Errorf("%v: differs from PyTorch ScheduleInterleaved1F1B\ngot:\n%swant:\n%s", c, got, torch)
				}
			}
		default:
			continue
		}
		if got != want {
			t.Errorf("%v: differs from %s\ngot:\n%swant:\n%s", c, ref, got, want)
		}
	}
	if torchChecked == 0 {
		t.Error("no interleaved case was compared with PyTorch")
	}
}

// TestClassicInterleavedMegatronTable pins the forward table of the example in
// Megatron-LM's interleaved schedule (PP 2, VP 2, M 5, groups of 3 and 2).
func TestClassicInterleavedMegatronTable(t *testing.T) {
	groups := interleavedGroups(2, 5)
	if !slices.Equal(groups, []int{3, 2}) {
		t.Fatalf("groups(P=2, M=5) = %v, want [3 2]", groups)
	}
	var micro, chunk []int
	for _, e := range interleavedTable(groups, 2) {
		micro = append(micro, e.micro)
		chunk = append(chunk, e.chunk)
	}
	if want := []int{0, 1, 2, 0, 1, 2, 3, 4, 3, 4}; !slices.Equal(micro, want) {
		t.Errorf("micro table %v, want %v", micro, want)
	}
	if want := []int{0, 0, 0, 1, 1, 1, 0, 0, 1, 1}; !slices.Equal(chunk, want) {
		t.Errorf("chunk table %v, want %v", chunk, want)
	}
	for _, tc := range []struct {
		p, m int
		want []int
	}{
		{4, 1, []int{1}}, {4, 3, []int{3}}, {4, 4, []int{4}}, {4, 7, []int{7}}, {4, 8, []int{4, 4}},
		{4, 11, []int{6, 5}}, {4, 14, []int{5, 5, 4}}, {3, 17, []int{4, 4, 3, 3, 3}}, {1, 3, []int{1, 1, 1}},
	} {
		if got := interleavedGroups(tc.p, tc.m); !slices.Equal(got, tc.want) {
			t.Errorf("groups(P=%d, M=%d) = %v, want %v", tc.p, tc.m, got, tc.want)
		}
	}
}

// TestClassicInterleavedExample pins one small order in full, P = 2, V = 2,
// M = 4: warm-up (V-1)·G₀ + 2·(P-1-r) = 4 on rank 0 and 2 on rank 1, and
// with less-memory (V-1)·G₀ + (P-1-r) = 3 on rank 0 and 2 on rank 1.
func TestClassicInterleavedExample(t *testing.T) {
	prog := classicBuild(t, classicCase{"interleaved", 2, 2, 4, false})
	want := "rank 0: 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3\n" +
		"rank 1: 1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3\n"
	if got := ir.FormatText(prog); got != want {
		t.Errorf("got:\n%swant:\n%s", got, want)
	}
	less := classicBuild(t, classicCase{"interleaved", 2, 2, 4, true})
	want = "rank 0: 0F0 0F1 2F0 2F1 2B0 0F2 2B1 0F3 0B0 2F2 0B1 2F3 2B2 2B3 0B2 0B3\n" +
		"rank 1: 1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3\n"
	if got := ir.FormatText(less); got != want {
		t.Errorf("less-memory got:\n%swant:\n%s", got, want)
	}
}

// classicCost returns unit costs for one chunk of a rank with v chunks: a full
// stage costs F = 12 and B = 24 (F = 1, B = 2 in units of 12, so that 1/V of a
// stage is a whole number for V in 1..4).
func classicCost(v int) func(ir.Step) int {
	return func(st ir.Step) int {
		if st.Kind == ir.Forward {
			return 12 / v
		}
		return 24 / v
	}
}

// TestClassicInterleavedBeats1F1B checks with the unit-time simulator (full
// stage F = 1, B = 2, each of V chunks 1/V of that, no communication) that
// interleaved finishes sooner than 1f1b for V ≥ 2, M ≥ P, P ≥ 2.
func TestClassicInterleavedBeats1F1B(t *testing.T) {
	for p := 2; p <= 8; p++ {
		for m := p; m <= 3*p; m++ {
			base, _, err := classicSim(classicBuild(t, classicCase{"1f1b", p, 1, m, false}), classicCost(1))
			if err != nil {
				t.Fatal(err)
			}
			for v := 2; v <= 4; v++ {
				c := classicCase{"interleaved", p, v, m, false}
				got, _, err := classicSim(classicBuild(t, c), classicCost(v))
				if err != nil {
					t.Fatalf("%v: %v", c, err)
				}
				if got >= base {
					t.Errorf("%v: makespan %d, not below 1f1b's %d", c, got, base)
				}
			}
		}
	}
}

// TestClassicLessMemory checks that less-memory never raises any rank's peak
// of live chunks, lowers rank 0's whenever the default warm-up is not already
// everything, matches the closed form min(V·M, w_r + 1), and (with no
// communication time) keeps the default's makespan.
func TestClassicLessMemory(t *testing.T) {
	for p := 1; p <= 8; p++ {
		for v := 1; v <= 4; v++ {
			for m := 1; m <= 3*p; m++ {
				def := classicCase{"interleaved", p, v, m, false}
				less := classicCase{"interleaved", p, v, m, true}
				spanDef, peakDef, err := classicSim(classicBuild(t, def), classicCost(v))
				if err != nil {
					t.Fatalf("%v: %v", def, err)
				}
				spanLess, peakLess, err := classicSim(classicBuild(t, less), classicCost(v))
				if err != nil {
					t.Fatalf("%v: %v", less, err)
				}
				// Without communication time the smaller warm-up costs nothing;
				// its bubble comes from latency, which this model leaves out.
				if spanLess != spanDef {
					t.Errorf("%v: makespan %d, want the default's %d when transfers take no time", less, spanLess, spanDef)
				}
				g0 := interleavedGroups(p, m)[0]
				for r := range p {
					if peakLess[r] > peakDef[r] {
						t.Errorf("%v: rank %d peak %d, above the default's %d", less, r, peakLess[r], peakDef[r])
					}
					for _, x := range []struct {
						c    classicCase
						peak int
					}{{def, peakDef[r]}, {less, peakLess[r]}} {
						if want := min(v*m, interleavedWarmup(p, v, m, r, g0, x.c.lessMemory)+1); x.peak != want {
							t.Errorf("%v: rank %d peak %d, want min(V·M, w+1) = %d", x.c, r, x.peak, want)
						}
					}
				}
				if v > 1 && p > 1 && (v-1)*g0+2*(p-1) < v*m && peakLess[0] >= peakDef[0] {
					t.Errorf("%v: rank 0 peak %d, not below the default's %d", less, peakLess[0], peakDef[0])
				}
			}
		}
	}
}

// TestClassicConstraintErrors checks that bad configurations fail with a
// *ConstraintError whose message names the value and what would work.
func TestClassicConstraintErrors(t *testing.T) {
	v := ir.VShape(4)
	other := ir.Loop(4, 3)
	for _, tc := range []struct {
		name string
		cfg  ir.Config
		want []string
	}{
		{"gpipe V=2", ir.Config{Schedule: "gpipe", Ranks: 4, Virtual: 2, Micro: 8},
			[]string{"schedule gpipe", "virtual = 2", "want virtual = 1", "use interleaved"}},
		{"1f1b V=3", ir.Config{Schedule: "1f1b", Ranks: 4, Virtual: 3, Micro: 8},
			[]string{"schedule 1f1b", "virtual = 3", "want virtual = 1", "use interleaved"}},
		{"1f1b ranks 0", ir.Config{Schedule: "1f1b", Ranks: 0, Micro: 8},
			[]string{"ranks = 0", "at least 1 rank"}},
		{"interleaved micro 0", ir.Config{Schedule: "interleaved", Ranks: 4, Micro: 0},
			[]string{"micro = 0", "at least 1 micro-batch"}},
		{"looped-bfs virtual -1", ir.Config{Schedule: "looped-bfs", Ranks: 4, Virtual: -1, Micro: 4},
			[]string{"virtual = -1", "at least 1 stage per rank"}},
		{"interleaved v placement", ir.Config{Schedule: "interleaved", Ranks: 4, Virtual: 2, Micro: 8, Placement: &v},
			[]string{"placement = v", "want loop"}},
		{"gpipe wrong loop size", ir.Config{Schedule: "gpipe", Ranks: 4, Virtual: 1, Micro: 8, Placement: &other},
			[]string{"placement = loop", "want loop", "one stage on each of the 4 ranks"}},
		{"1f1b less-memory", ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8, Options: ir.Options{LessMemory: true}},
			[]string{"less-memory = on", "interleaved only"}},
		{"gpipe less-memory", ir.Config{Schedule: "gpipe", Ranks: 4, Micro: 8, Options: ir.Options{LessMemory: true}},
			[]string{"less-memory = on"}},
		{"looped-bfs less-memory", ir.Config{Schedule: "looped-bfs", Ranks: 4, Micro: 8, Options: ir.Options{LessMemory: true}},
			[]string{"less-memory = on"}},
		{"interleaved too big", ir.Config{Schedule: "interleaved", Ranks: 1 << 12, Virtual: 1 << 12, Micro: 2},
			[]string{"virtual = 4096", "ranks × virtual ≤ 65535 stages"}},
		{"interleaved too many chunks", ir.Config{Schedule: "interleaved", Ranks: 1 << 6, Virtual: 1 << 4, Micro: 65},
			[]string{"micro = 65", "ranks × virtual × micro ≤ 32768", "at most 32 micro-batches"}},
		{"1f1b too many ranks", ir.Config{Schedule: "1f1b", Ranks: 70000, Virtual: 1, Micro: 2},
			[]string{"ranks = 70000", "at most 65535 ranks"}},
		{"gpipe overflow", ir.Config{Schedule: "gpipe", Ranks: 1 << 40, Virtual: 1, Micro: 1 << 40},
			[]string{"at most 65535 ranks"}},
		{"gpipe huge micro", ir.Config{Schedule: "gpipe", Ranks: 1, Virtual: 1, Micro: 1 << 62},
			[]string{"at most 65535 micro-batches"}},
	} {
		_, err := Build(tc.cfg)
		var ce *ConstraintError
		if !errors.As(err, &ce) {
			t.Errorf("%s: error %v (%T), want *ConstraintError", tc.name, err, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tc.name, err, w)
			}
		}
	}
}

// TestClassicDirectBuild calls the Build functions without Normalize, as a
// caller holding a Family may: bad values must give errors, not panics
// (Family.Build normalizes first: V = 0 is the family's default).
func TestClassicDirectBuild(t *testing.T) {
	for _, name := range []string{"gpipe", "1f1b", "interleaved", "looped-bfs"} {
		f, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, cfg := range []ir.Config{
			{Schedule: name, Ranks: 2, Virtual: -1, Micro: 2},
			{Schedule: name, Ranks: -1, Virtual: 1, Micro: 2},
			{Schedule: name, Ranks: 2, Virtual: 1, Micro: -5},
		} {
			var ce *ConstraintError
			if _, err := f.Build(cfg); !errors.As(err, &ce) {
				t.Errorf("%s %+v: error %v, want *ConstraintError", name, cfg, err)
			}
		}
	}
}

// TestClassicRegistry checks the families' registry entries and defaults.
func TestClassicRegistry(t *testing.T) {
	for _, tc := range []struct {
		name     string
		defaultV int
	}{{"gpipe", 1}, {"1f1b", 1}, {"interleaved", 2}, {"looped-bfs", 2}} {
		f, err := Lookup(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if f.Summary == "" || f.Constraints == "" || f.DefaultVirtual != tc.defaultV {
			t.Errorf("%s: summary %q constraints %q default V %d, want both set and V %d", tc.name, f.Summary, f.Constraints, f.DefaultVirtual, tc.defaultV)
		}
		prog, err := Build(ir.Config{Schedule: tc.name, Ranks: 4, Micro: 8})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := prog.Placement.Virtual(); got != tc.defaultV {
			t.Errorf("%s: built with V = %d, want the default %d", tc.name, got, tc.defaultV)
		}
	}
	loop := ir.Loop(4, 2)
	if _, err := Build(ir.Config{Schedule: "interleaved", Ranks: 4, Virtual: 2, Micro: 8, Placement: &loop}); err != nil {
		t.Errorf("interleaved with an explicit loop placement: %v", err)
	}
}

// TestClassicCheckerCatches makes sure the test checker itself rejects
// infeasible and malformed orders, so that its silence above means something.
func TestClassicCheckerCatches(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ranks    []string
		shapeErr bool
	}{
		// Rank 0 waits for B(1,0) before running F(0,1); rank 1 needs F(0,1) first.
		{"cross-rank cycle", []string{"0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1"}, false},
		{"backward before its forward", []string{"0B0 0F0 0F1 0B1", "1F0 1B0 1F1 1B1"}, false},
		{"missing backward", []string{"0F0 0F1 0B0", "1F0 1B0 1F1 1B1"}, true},
		{"duplicate forward", []string{"0F0 0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"}, true},
		{"stage on the wrong rank", []string{"0F0 0B0 1F1", "1F0 1B0 0F1 0B1 1B1"}, true},
		{"a transfer step", []string{"0F0 0SEND_F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"}, true},
	} {
		prog := ir.NewProgram(ir.Loop(2, 1), 2)
		for r, line := range tc.ranks {
			for _, f := range strings.Fields(line) {
				st, err := ir.ParseStep(f)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				prog.Ranks[r] = append(prog.Ranks[r], st)
			}
		}
		shape := classicCheckShape(prog, 2, 1, 2)
		_, _, sim := classicSim(prog, classicZeroCost)
		if tc.shapeErr && shape == nil {
			t.Errorf("%s: shape check passed", tc.name)
		}
		if !tc.shapeErr && (shape != nil || sim == nil) {
			t.Errorf("%s: shape error %v, feasibility error %v; want only the latter", tc.name, shape, sim)
		}
	}
}
