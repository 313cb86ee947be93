package partition

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
)

// Placed splits the layers of m into the stages of pl (one pipeline, every
// micro-batch through every stage in order) for an order yet to be built,
// judged by three sums alone, no simulation, in this order:
//
//  1. the busiest rank's work per micro-batch (F + I + W of its stages'
//     layers): the makespan's steady-state term;
//  2. the largest rank's activation-time per micro-batch: over its stages,
//     a stage's act times its chunk's shortest life, the F's and I's of
//     every layer from the stage's first to the model's last and the
//     stage's W's (the chain a chunk stays live through, transfers
//     free). By Little's law a rank holds that over the period on
//     average, so under a memory cap the split with less of it leaves
//     more room for waiting (the LLM-like model's head and loss, 4× a
//     block's activations, end up alone in the last stage, and the ranks'
//     first stages, whose chunks live longest, get fewer layers than
//     their late ones);
//  3. the sum of the stages' squared work.
//
// It starts from the even split and climbs (Climb) while a move improves
// those sums: of moves that tie on them the latest stage gets the layer,
// its chunk living shortest (against the earliest first, the LLM-like
// model at P = 8, M = 32 within 18.5: 533.6 against 560.3 on the orders
// auto synthesizes for each). It scores at most placedWork stages in all
// (a sweep scores S² splits of S stages each, so on thousands of stages
// it stops early with the best split so far): deterministic.
//
// Search's starts (the even and Balanced splits) weigh stages alone;
// auto synthesizes orders from this split too under a memory limit
// (gen/auto/autosynth.go).
func Placed(m model.Model, pl ir.Placement) (model.Partition, error) {
	L, S, P := len(m.Layers), pl.Stages(), pl.Ranks()
	even, err := model.Even(L, S)
	if err != nil {
		return model.Partition{}, err
	}
	if P < 1 {
		return model.Partition{}, fmt.Errorf("partition: placement %s has no ranks", pl)
	}
	// Prefix sums: work, act and W up to each layer, F + I from each
	// layer to the end.
	work, act, wgt, chain := make([]float64, L+1), make([]float64, L+1), make([]float64, L+1), make([]float64, L+1)
	for i, l := range m.Layers {
		work[i+1] = work[i] + l.F + l.I + l.W
		act[i+1] = act[i] + l.Act
		wgt[i+1] = wgt[i] + l.W
	}
	for i := L - 1; i >= 0; i-- {
		chain[i] = chain[i+1] + m.Layers[i].F + m.Layers[i].I
	}
	cnt := even.Counts()
	rw, rt := make([]float64, P), make([]float64, P)
	score := func() [3]float64 {
		clear(rw)
		clear(rt)
		sq, at := 0.0, 0
		for s, n := range cnt {
			r, end := pl.RankOf[s], at+n
			x := work[end] - work[at]
			rw[r] += x
			rt[r] += (act[end] - act[at]) * (chain[at] + wgt[end] - wgt[at])
			sq += x * x
			at = end
		}
		var sc [3]float64
		for r := range P {
			sc[0], sc[1] = max(sc[0], rw[r]), max(sc[1], rt[r])
		}
		sc[2] = sq
		return sc
	}
	less := func(a, b [3]float64) bool {
		for k := range a {
			if eps := 1e-9 * max(1, b[k]); a[k] < b[k]-eps {
				return true
			} else if a[k] > b[k]+eps {
				return false
			}
		}
		return false
	}
	best := score()
	if err := Climb(cnt, placedWork/S, func() (bool, error) {
		sc := score()
		if less(sc, best) {
			best = sc
			return true, nil
		}
		return false, nil
	}); err != nil {
		return model.Partition{}, err
	}
	p := model.FromCounts(cnt)
	return p, p.Check(L)
}

// Climb is the local search over a split's layer counts (cnt[s] layers in
// stage s, changed in place) that Placed and auto's split climb share: it
// moves one layer's worth of count from a stage to another (the boundaries
// between them shift by one; every stage keeps a layer), stages given up
// from the first and taken up from the last, and keeps a move when keep
// says it improves (else undoes it), first improvement, until a whole
// sweep keeps none or tries moves have been tried. Of moves that tie in
// keep's eyes the latest stage gets the layer, whose chunk lives shortest.
func Climb(cnt []int, tries int, keep func() (bool, error)) error {
	S := len(cnt)
	for improved := true; improved && tries > 0; {
		improved = false
		for i := range S {
			for j := S - 1; j >= 0 && tries > 0; j-- {
				if i == j || cnt[i] <= 1 {
					continue
				}
				tries--
				cnt[i]--
				cnt[j]++
				ok, err := keep()
				if err != nil {
					return err
				}
				if ok {
					improved = true
					continue
				}
				cnt[i]++
				cnt[j]--
			}
		}
	}
	return nil
}

// placedWork bounds the stage sums Placed computes (under a tenth of a
// second).
const placedWork = 20_000_000
