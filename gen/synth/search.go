package synth

import (
	"errors"
	"slices"

	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// Rules returns the rules Search tries for P ranks and M micro-batches:
// every Forward choice, W as fill and eager, with and without Headroom, unpaced and paced at the busiest rank's period (Pace 1), and in-flight bounds of
// about P/4, P/2, 3P/4, P, 3P/2, 2P micro-batches and none (those below M
// only, each once), in that order.
func Rules(P, M int) []Rule {
	var ks []int
	for _, k := range []int{(P + 3) / 4, (P + 1) / 2, (3*P + 3) / 4, P, (3*P + 1) / 2, 2 * P} {
		if k >= 1 && k < M && !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	ks = append(ks, 0)
	var out []Rule
	for _, k := range ks {
		for _, f := range []Forward{Oldest, Deepest, Shallowest} {
			for _, eager := range []bool{false, true} {
				for _, room := range []bool{false, true} {
					for _, pace := range []float64{0, 1} {
						out = append(out, Rule{InFlight: k, Forward: f, EagerW: eager, Headroom: room, Pace: pace})
					}
				}
			}
		}
	}
	return out
}

// Found is Search's result: the best order found, the rule that built it
// and its simulated makespan (the compute order alone, under the
// problem's cost).
type Found struct {
	Program  ir.Program
	Rule     Rule
	Makespan float64
	// Tried is the number of rules tried, Stuck how many of them left
	// every rank waiting.
	Tried, Stuck int
}

// Search runs Schedule for every rule (on all cores; each rule writes only
// its own result) and returns the order with the smallest simulated
// makespan, the first of the rules among equals: deterministic for given
// inputs. It fails with ErrStuck when every rule does.
func Search(p Problem, rules []Rule) (Found, error) {
	if _, err := p.check(); err != nil {
		return Found{}, err
	}
	type one struct {
		prog ir.Program
		ms   float64
		err  error
	}
	res := make([]one, len(rules))
	work := len(rules) * 3 * p.Placement.Stages() * p.Micro
	par.ForRanks(len(rules), work, func(i int) {
		prog, err := Schedule(p, rules[i])
		if err != nil {
			res[i].err = err
			return
		}
		r, err := sim.Run(prog, p.Cost)
		if err != nil {
			res[i].err = err
			return
		}
		res[i] = one{prog: prog, ms: r.Makespan}
	})
	best := Found{Tried: len(rules)}
	found := false
	for i, o := range res {
		switch {
		case errors.Is(o.err, ErrStuck):
			best.Stuck++
			continue
		case o.err != nil:
			return Found{}, o.err // a simulation error: a bug here, not the rule's
		}
		if !found || o.ms < best.Makespan*(1-1e-9) {
			best.Program, best.Rule, best.Makespan, found = o.prog, rules[i], o.ms, true
		}
	}
	if !found {
		return best, ErrStuck
	}
	return best, nil
}
