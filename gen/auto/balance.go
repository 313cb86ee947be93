package auto

import (
	"fmt"
	"runtime"
	"slices"

	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/synth"
)

// BalancedName is the candidate name of an order auto synthesizes on a
// placement balancePlan derived from one of synthPlacements.
const BalancedName = "synth(balanced)"

// balancePlan moves stages between ranks when a model's uneven layers
// leave one rank with more work than the others whatever the split: on
// the zigzag with V = 8 the LLM-like model's first rank holds the
// embedding's stage, the head's and six more, one layer at least each,
// 27.6 against 27, 27 and 24 per micro-batch. From top's placement it
// tries every move of one stage of the busiest rank (the first, on a tie)
// to another rank that leaves it a stage, takes partition.Placed's split
// of the result, keeps the moves after which the busiest rank has less
// work, and synthesizes an order for each (synthesize, on all cores). The
// move whose order is fastest lowered (the first on a tie) is taken when
// it beats the placement it came from, and the search goes on from there,
// at most balanceMoves moves. It returns the plan of the last placement
// taken, or nil when no move beats top: deterministic.
func balancePlan(cfg ir.Config, sp *SplitModel, top *plan, limit float64, lowered func(ir.Program, model.Partition) (synth.Score, bool)) (*plan, error) {
	pl, best := top.pl, top.bestLow.Makespan
	var found *plan
	for range balanceMoves {
		part, err := partition.Placed(sp.Model, pl)
		if err != nil {
			return found, nil // no split of this placement to weigh: no move from it
		}
		loads, err := rankLoads(sp, pl, part)
		if err != nil {
			return nil, err
		}
		busy := 0
		for r, w := range loads {
			if w > loads[busy] {
				busy = r
			}
		}
		type move struct {
			pl   ir.Placement
			part model.Partition
			f    *synthFound
			low  synth.Score
		}
		var moves []*move
		held := make([]int, pl.Ranks())
		for _, r := range pl.RankOf {
			held[r]++
		}
		for s, r := range pl.RankOf {
			if r != busy || held[r] < 2 {
				continue
			}
			for to := range pl.Ranks() {
				if to == busy {
					continue
				}
				q := ir.Placement{Name: "table", NumRanks: pl.NumRanks, RankOf: append([]int(nil), pl.RankOf...)}
				q.RankOf[s] = to
				qp, err := partition.Placed(sp.Model, q)
				if err != nil {
					continue
				}
				ql, err := rankLoads(sp, q, qp)
				if err != nil {
					return nil, err
				}
				if slices.Max(ql) < loads[busy]*(1-1e-9) {
					moves = append(moves, &move{pl: q, part: qp})
				}
			}
		}
		if len(moves) == 0 {
			break
		}
		errs := make([]error, len(moves))
		par.ForRanksW(min(runtime.GOMAXPROCS(0), len(moves)), len(moves), func(_, i int) {
			mv := moves[i]
			if mv.f, errs[i] = synthesize(cfg, sp, mv.pl, mv.part, limit); mv.f != nil {
				var ok bool
				if mv.low, ok = lowered(mv.f.prog, mv.f.part); !ok {
					mv.f = nil
				}
			}
		})
		var take *move
		for i, mv := range moves {
			if errs[i] != nil {
				return nil, errs[i]
			}
			if mv.f != nil && mv.low.Makespan < best*(1-1e-9) && (take == nil || mv.low.Makespan < take.low.Makespan*(1-1e-9)) {
				take = mv
			}
		}
		if take == nil {
			break
		}
		pk := top.pk
		pk.name = BalancedName
		even, err := model.Even(len(sp.Model.Layers), take.pl.Stages())
		if err != nil {
			return nil, err
		}
		found = &plan{pk: pk, pl: take.pl, even: even, best: take.f, bestLow: take.low, starts: []start{{take.f.prog, take.f.part}}}
		pl, best = take.pl, take.low.Makespan
	}
	return found, nil
}

// balanceMoves is the most stages balancePlan moves.
const balanceMoves = 4

// rankLoads is each rank's work for one micro-batch (its stages' F, I and
// W, or B) under the split part.
func rankLoads(sp *SplitModel, pl ir.Placement, part model.Partition) ([]float64, error) {
	c, err := sp.Pricing.Split(part, 1)
	if err != nil {
		return nil, err
	}
	if c, err = c.Resolve(pl.Stages()); err != nil {
		return nil, fmt.Errorf("schedule auto: the cost of a split for %s: %w", pl, err)
	}
	loads := make([]float64, pl.Ranks())
	for s, r := range pl.RankOf {
		loads[r] += c.StepCost(ir.Compute(ir.Forward, s, 0)) + c.StepCost(ir.Compute(ir.Backward, s, 0))
	}
	return loads, nil
}
