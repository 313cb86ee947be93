package partition

import (
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/pricing"
	"github.com/ppgen/ppgen/gen/sim"
)

// Stage is one stage of a split as `ppgen partition` reports it.
type Stage struct {
	Stage, Rank int
	First, End  int    // layers First..End-1
	Layers      string // their names, "block3..block7" (Range)
	F, I, W     float64
	Act, Params float64 // a live chunk's activations, the parameters
}

// Report is `ppgen partition`'s answer (Compare): the split Search finds
// for a schedule's order, against the even one, both lowered and
// simulated.
type Report struct {
	Schedule               string
	Ranks, Virtual, Micro  int
	LayerCount             int
	Stages                 []Stage // one model copy's
	Copies                 int
	Makespan, EvenMakespan float64
	Mem, EvenMem           float64 // the busiest rank's peak memory (model units)
	LowerBound, EvenBound  float64 // sim.LowerBound of each split's stages
	Bounds, EvenBounds     []int
	Evals                  int
	// Recompute is the -recompute policy both splits were lowered with;
	// RecomputeChosen says `ppgen partition` chose it under -mem (none
	// given), where no split fit without it or it fit a faster one.
	Recompute       string
	RecomputeChosen bool
}

// Schedule is what Compare splits a model's layers for: a lowered
// schedule and how to lower it again with a given split.
type Schedule struct {
	Config  ir.Config  // the family and its size, as reported
	Compute ir.Program // the compute order Search splits for
	// Lower lowers the schedule with its stages split by part (whose
	// costs may shape its order and its transfers) and simulates it: the
	// lowered program, its makespan and its busiest rank's peak memory.
	Lower func(part model.Partition) (p ir.Program, makespan, mem float64, err error)
}

// Compare splits m's layers into the stages of s by Search for its compute
// order under opt, lowers and simulates s with that split and with the
// even one (s.Lower), and reports both: makespans, peak memory, lower
// bounds (sim.LowerBound under opt.Cost) and each stage of the split found.
func Compare(m model.Model, s Schedule, opt Options) (Report, error) {
	copies := Copies(s.Compute)
	pr, err := Search(m, s.Compute, opt)
	if err != nil {
		return Report{}, err
	}
	costOf := opt.Cost
	if costOf == nil {
		costOf = func(part model.Partition) (sim.Cost, error) { return pricing.OfModel(m).Split(part, copies) }
	}
	rep := Report{
		Schedule: s.Config.Schedule, Ranks: s.Config.Ranks, Virtual: s.Config.Virtual, Micro: s.Config.Micro,
		LayerCount: len(m.Layers), Copies: copies, Evals: pr.Evals,
		Bounds: pr.Split.Bounds, EvenBounds: pr.Even.Bounds,
	}
	for i, part := range []model.Partition{pr.Split, pr.Even} {
		p, makespan, mem, err := s.Lower(part)
		if err != nil {
			return Report{}, err
		}
		c, err := costOf(part)
		if err != nil {
			return Report{}, err
		}
		lb, err := sim.LowerBound(p, c, sim.BoundOptions{})
		if err != nil {
			return Report{}, err
		}
		if i == 0 {
			rep.Makespan, rep.Mem, rep.LowerBound = makespan, mem, lb
		} else {
			rep.EvenMakespan, rep.EvenMem, rep.EvenBound = makespan, mem, lb
		}
	}
	c, err := pricing.OfModel(m).Split(pr.Split, 1)
	if err != nil {
		return Report{}, err
	}
	act, params, err := StageMemory(m, pr.Split, 1)
	if err != nil {
		return Report{}, err
	}
	for st := range pr.Split.Stages() {
		first, end := pr.Split.Bounds[st], pr.Split.Bounds[st+1]
		rep.Stages = append(rep.Stages, Stage{
			Stage: st, Rank: s.Compute.Placement.RankOf[st], First: first, End: end,
			Layers: Range(m, first, end),
			F:      at(c.F, st), I: at(c.I, st), W: at(c.W, st), Act: act[st], Params: params[st],
		})
	}
	return rep, nil
}

// at is stage s's value of a per-stage list, one value standing for every
// stage.
func at(l []float64, s int) float64 {
	if len(l) == 1 {
		return l[0]
	}
	return l[s]
}
