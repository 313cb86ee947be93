package schedules

import (
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
)

func init() {
	Register(Family{
		Name:           "interleaved",
		Aliases:        []string{"Interleaved1F1B"}, // PyTorch: ScheduleInterleaved1F1B
		Summary:        "interleaved 1F1B (Megatron-style, depth-first over V stages per rank); option less-memory",
		Constraints:    "any ranks ≥ 1, virtual ≥ 1 and micro ≥ 1 (micro < ranks and micro not a multiple of ranks included)",
		DefaultVirtual: 2,
		Build:          buildInterleaved,
	})
}

// buildInterleaved returns Megatron-LM's depth-first interleaved 1F1B order
// (arXiv 2104.04473), generalised to every M as hyper-parallel does. Rank r
// holds the V stages r, r+P, ..., r+(V-1)P (loop placement); local stage c
// of rank r is stage c·P + r.
//
// Groups. The M micro-batches are cut into consecutive groups (Megatron's
// microbatch_group_size_per_vp_stage, PyTorch's rounds): a single group of M
// when M < P; otherwise ⌊M/P⌋ groups whose sizes are P plus an even share of
// the M mod P left-over micro-batches, the first groups taking one more when
// the share is uneven (so for M ≥ P every group has at least P micro-batches;
// in all cases G₀, the first group's size, is the largest). For M a multiple of P every group has
// P micro-batches, which is Megatron's default and PyTorch's layout.
//
// Table. The forward table lists the V·M chunks as (micro-batch, local stage)
// pairs: group by group, local stage 0 for the group's micro-batches in
// ascending order, then local stage 1 for the same micro-batches, ..., up to
// local stage V-1. For P = 2, V = 2, M = 5 (groups 3, 2):
//
//	micro | 0 1 2 0 1 2 3 4 3 4
//	stage | 0 0 0 1 1 1 0 0 1 1
//
// The k-th forward of every rank is table[k]; the k-th backward is table[k]
// with the local stage mirrored (c -> V-1-c), so backwards walk the stages
// from last to first.
//
// Warm-up. Rank r runs w_r forwards before its first backward:
//
//	w_r = min(V·M, (V-1)·G₀ + 2·(P-1-r))   for V ≥ 2 (Megatron, PyTorch, hyper-parallel)
//	w_r = min(M, P-1-r)                    for V = 1
//
// then, for k = w_r .. V·M-1, forward k followed by backward k-w_r (the
// steady state), then the remaining backwards V·M-w_r .. V·M-1 (cool-down).
// The V = 1 warm-up is the 1F1B one, so interleaved with V = 1 is exactly the
// 1f1b order (Megatron likewise runs its non-interleaved 1F1B for one chunk).
// The (V-1)·G₀ term makes the first backward's forward (the last local stage
// of micro-batch 0) run before it; the 2·(P-1-r) term lets a rank keep
// forwarding while the first gradient travels back from the last rank, two
// compute slots per hop when forward and backward cost the same.
//
// Less memory. With cfg.Options.LessMemory the warm-up grows by one forward
// per hop to the last rank instead of two (V = 1 is unchanged):
//
//	w_r = min(V·M, (V-1)·G₀ + (P-1-r))
//
// Rank r keeps at most min(V·M, w_r + 1) chunks live at once (a chunk is 1/V
// of a full stage's activations), up to P-1-r fewer than the default. Rank 0
// peaks at (V-1)·G₀ + P chunks instead of (V-1)·G₀ + 2P-1; when M is a
// multiple of P that is V·P chunks, P full-stage micro-batches, the same as
// 1F1B. The price is bubble under
// communication latency: when transfers take no time the makespan equals the
// default's (in the unit model with F = 1, B = 2 per stage, and with F = B),
// but a rank then has one spare forward per hop, not two, to cover the first
// gradient's round trip, so point-to-point latency shows as idle time in the
// steady state (with a latency of 1/6 of a stage's F, P = 8, V = 2, M = 32
// runs about 14% longer than the default).
//
// Both warm-ups keep the order feasible: w_r never decreases towards the
// first rank and is at least (V-1)·G₀, so every backward finds its own
// forward done and no two ranks wait on each other (the tests check this over
// P ≤ 8, V ≤ 4, M ≤ 3P and some larger cases).
func buildInterleaved(cfg ir.Config) (ir.Program, error) {
	p, err := classicProgram("interleaved", cfg, false)
	if err != nil {
		return ir.Program{}, err
	}
	ranks, v, m := cfg.Ranks, cfg.Virtual, cfg.Micro
	groups := interleavedGroups(ranks, m)
	table := interleavedTable(groups, v)
	// Each rank's order reads the table alone: ranks are built in parallel.
	par.ForRanks(ranks, 2*len(table)*ranks, func(r int) {
		w := interleavedWarmup(ranks, v, m, r, groups[0], cfg.Options.LessMemory)
		p.Ranks[r] = interleavedRankOrder(table, ranks, v, r, w, ir.Backward)
	})
	return p, nil
}

// interleavedRankOrder returns rank r's order of the interleaved schedule
// with w warm-up forwards (0 ≤ w ≤ len(table)): forwards table[0..w-1],
// then forward k and backward k-w alternating, then the remaining
// backwards; back is the kind of the backwards (B, or I for interleaved-zb).
func interleavedRankOrder(table []interleavedRef, ranks, v, r, w int, back ir.Kind) []ir.Step {
	n := len(table) // V·M
	// Each step is written once into the fresh list, field by field (Sub
	// stays nil): w forwards, n-w pairs, w backwards.
	steps := make([]ir.Step, 2*n)
	i := 0
	put := func(k ir.Kind, stage, micro int) {
		d := &steps[i]
		d.Kind, d.Stage, d.Micro, d.Peer, d.Slot = k, stage, micro, ir.None, ir.None
		i++
	}
	forward := func(k int) {
		e := &table[k]
		put(ir.Forward, e.chunk*ranks+r, e.micro)
	}
	backward := func(k int) {
		e := &table[k]
		put(back, (v-1-e.chunk)*ranks+r, e.micro)
	}
	for k := 0; k < w; k++ {
		forward(k)
	}
	for k := w; k < n; k++ {
		forward(k)
		backward(k - w)
	}
	for k := n - w; k < n; k++ {
		backward(k)
	}
	return steps
}

// interleavedGroups returns the sizes of the consecutive micro-batch groups
// of the interleaved schedule (see buildInterleaved). They sum to m.
func interleavedGroups(ranks, m int) []int {
	if m < ranks {
		return []int{m}
	}
	n := m / ranks
	extra := m % ranks
	groups := make([]int, n)
	for i := range groups {
		groups[i] = ranks + extra/n
		if i < extra%n {
			groups[i]++
		}
	}
	return groups
}

// interleavedRef is one entry of the interleaved table: a micro-batch and a local
// stage index (0..V-1).
type interleavedRef struct{ micro, chunk int }

// interleavedTable returns the forward table of the interleaved schedule
// (see buildInterleaved): group by group, each local stage in turn over the
// group's micro-batches.
func interleavedTable(groups []int, v int) []interleavedRef {
	total := 0
	for _, g := range groups {
		total += g
	}
	table := make([]interleavedRef, 0, v*total)
	start := 0
	for _, g := range groups {
		for c := 0; c < v; c++ {
			for i := start; i < start+g; i++ {
				table = append(table, interleavedRef{micro: i, chunk: c})
			}
		}
		start += g
	}
	return table
}

// interleavedWarmup returns w_r, the number of forwards rank r runs before its
// first backward (see buildInterleaved); g0 is the first group's size.
func interleavedWarmup(ranks, v, m, r, g0 int, lessMemory bool) int {
	hops := ranks - 1 - r
	var w int
	switch {
	case v == 1:
		w = hops
	case lessMemory:
		w = (v-1)*g0 + hops
	default:
		w = (v-1)*g0 + 2*hops
	}
	return min(w, v*m)
}
