package schedules

import (
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
)

func init() {
	Register(Family{
		Name:           "zbv",
		Aliases:        []string{"ZBVZeroBubble"}, // PyTorch: ScheduleZBVZeroBubble
		Summary:        "zero bubble ZB-V: two stages per rank in a V, I/W split; 1F1B's memory, bubble ≈ (P-1)/(6M+P-1) at F = I = W",
		Constraints:    "virtual = 2 on the v placement; any ranks ≥ 1 and micro ≥ 1 (the full warm-up needs micro ≥ 2·ranks-1)",
		DefaultVirtual: 2,
		Build:          buildZBV,
	})
}

// buildZBV returns the handcrafted ZB-V schedule of Qi et al. (arXiv
// 2401.10241, §6), as in the reference implementation and PyTorch's
// ScheduleZBVZeroBubble. Rank r holds the "down" stage d = r and the "up"
// stage u = 2P-1-r (v placement), so a micro-batch's forward walks the ranks
// 0..P-1 and back, and its backward does the same in reverse; the last stage
// 2P-1 is on rank 0. With n = max(M, 2P-1) micro-batches per stage, rank r
// runs:
//
//   - warm-up: 2(P-r)-1 forwards of d; then r pairs F(u), F(d); then P-r
//     triples F(u), I(u), W(u) (rank 0 turns the first micro-batches' loss
//     into gradients right away);
//   - steady state, until every forward is done: F(d) (while any is left),
//     I(d), W(d), F(u), I(u), W(u);
//   - cool-down: r pairs I(d), I(u) with their W's deferred, then P-r pairs
//     I(d), W(d) (the oldest deferred d), then the deferred W(u)'s and the
//     remaining W(d)'s.
//
// Each stage runs its micro-batches in ascending order. When M <
// 2P-1 the steps of the padding micro-batches M..n-1 are dropped; dropping
// whole micro-batches keeps the order deadlock-free.
//
// Rank r holds at most 2P live chunks (F run, W not yet), P full stages'
// worth: 1F1B's peak. At F = I = W = 1 with no comm cost and M ≥ 2P-1 the
// makespan is 6M+P-1 (every rank idle P-1 units), e.g. a 7/199 ≈ 0.035
// whole-iteration bubble at P = 8, M = 32; the last rank has no bubble
// between its first and last step.
func buildZBV(cfg ir.Config) (ir.Program, error) {
	p, err := zbVProgram("zbv", cfg)
	if err != nil {
		return ir.Program{}, err
	}
	ranks, m := cfg.Ranks, cfg.Micro
	n := max(m, 2*ranks-1)
	// Each rank's order is its own: ranks are built in parallel.
	par.ForRanks(ranks, 6*m*ranks, func(r int) {
		b := zbvRank{down: r, up: 2*ranks - 1 - r, m: m, steps: make([]ir.Step, 0, 6*m)}
		b.rep(2*(ranks-r)-1, func() { b.f(&b.fd, b.down) }, &b.fd)
		b.rep(r, func() {
			b.f(&b.fu, b.up)
			b.f(&b.fd, b.down)
		}, &b.fu, &b.fd)
		b.rep(ranks-r, func() {
			b.f(&b.fu, b.up)
			b.iw(&b.iu, &b.wu, b.up)
		}, &b.fu, &b.iu, &b.wu)
		// Steady state: until F(d) reaches n and F(u) catches up with it. F(u)
		// runs once per round and ends at n, so there are n-fu rounds; F(d) ≥ F(u)
		// throughout, so the rounds emit nothing once F(u) and the backward
		// counters reach m.
		fd0, rounds := b.fd, n-b.fu
		b.rep(rounds, func() {
			if b.fd < n {
				b.f(&b.fd, b.down)
			}
			b.iw(&b.id, &b.wd, b.down)
			b.f(&b.fu, b.up)
			b.iw(&b.iu, &b.wu, b.up)
		}, &b.fu, &b.id, &b.wd, &b.iu, &b.wu)
		b.fd = min(n, fd0+rounds)
		b.rep(r, func() {
			b.add(ir.BackwardInput, b.down, &b.id)
			b.add(ir.BackwardInput, b.up, &b.iu)
		}, &b.id, &b.iu)
		b.rep(ranks-r, func() {
			b.add(ir.BackwardInput, b.down, &b.id)
			b.add(ir.BackwardWeight, b.down, &b.wd)
		}, &b.id, &b.wd)
		for b.wu < min(b.iu, m) {
			b.add(ir.BackwardWeight, b.up, &b.wu)
		}
		for b.wd < min(b.id, m) {
			b.add(ir.BackwardWeight, b.down, &b.wd)
		}
		p.Ranks[r] = b.steps
	})
	return p, nil
}

// zbvRank builds one rank's ZB-V order: counters of the forwards, I's and W's
// run so far on the down and up stages, and the steps, from which those of
// padding micro-batches (≥ m) are left out.
type zbvRank struct {
	down, up               int
	m                      int
	fd, fu, id, iu, wd, wu int
	steps                  []ir.Step
}

// rep runs body count times, each run advancing every counter in cs by one.
// Once all of them have reached m the remaining runs would emit nothing (they
// belong to padding micro-batches), so rep advances the counters by those runs
// instead: the work stays proportional to M rather than to P per rank.
func (b *zbvRank) rep(count int, body func(), cs ...*int) {
	// Every run advances every counter by one, so they have all reached
	// m after m - (the lowest) runs: those run, the rest are skipped.
	lo := b.m
	for _, c := range cs {
		lo = min(lo, *c)
	}
	live := min(count, max(b.m-lo, 0))
	for range live {
		body()
	}
	for _, c := range cs {
		*c += count - live
	}
}

// add appends kind on stage for the next micro-batch of counter c.
func (b *zbvRank) add(kind ir.Kind, stage int, c *int) {
	if *c < b.m {
		b.steps = append(b.steps, ir.Compute(kind, stage, *c))
	}
	*c++
}

func (b *zbvRank) f(c *int, stage int) { b.add(ir.Forward, stage, c) }

// iw appends I then W of the same micro-batch (the W counter follows the I one).
func (b *zbvRank) iw(ci, cw *int, stage int) {
	b.add(ir.BackwardInput, stage, ci)
	b.add(ir.BackwardWeight, stage, cw)
}
