package schedules

import (
	"fmt"
	"slices"

	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/ir"
)

// This file holds the zb-h1 family and what the zero-bubble families
// (zb-h1, zb-h2, interleaved-zb, zbv, v-half, v-min, dualpipe, dualpipev)
// share: validation and zbFill, the pass that places W steps in a skeleton
// of forwards and input-gradient backwards.

func init() {
	Register(Family{
		Name:           "zb-h1",
		Summary:        "zero bubble ZB-H1 (ZB-1p): 1F1B with B split into I and W, W's deferred into the bubbles; 1F1B's memory",
		Constraints:    "virtual = 1; any ranks ≥ 1 and micro ≥ 1",
		DefaultVirtual: 1,
		Build:          buildZBH1,
	})
}

// buildZBH1 returns ZB-H1 of Qi et al., "Zero Bubble Pipeline Parallelism"
// (arXiv 2401.10241, §2.1). Rank r holds stage r. Its forwards and
// input-gradient backwards follow 1F1B: w = min(M, P-r) warm-up forwards,
// then I(r, i), F(r, w+i) alternating, then the remaining I's in micro-batch
// order. The weight-gradient steps W are placed by zbFill with a limit of P
// live chunks on every rank (1F1B's peak on rank 0): a rank runs its oldest
// pending W whenever its next F or I would have to wait for a neighbour, and
// before a forward that would make it hold more than P chunks. So rank 0 runs
// F, I, W in the steady state, the last rank defers up to P-1 W's, and the
// deferred W's fill the cool-down.
//
// At F = I = W = 1 with no comm cost every rank is idle exactly P-1 units and
// the makespan is 3M+P-1 when M ≥ P: a whole-iteration bubble of
// (P-1)/(3M+P-1), with a third of 1F1B's idle time. For M < P the first
// gradient reaches rank 0 only at 2P-1 and the makespan is 2M+2P-1, which no
// order beats (rank 0 still has M I's and M W's to run after that).
func buildZBH1(cfg ir.Config) (ir.Program, error) {
	const name = "zb-h1"
	p, err := zbLoopProgram(name, cfg, 1)
	if err != nil {
		return ir.Program{}, err
	}
	skel := zbOneStageSkeleton(cfg.Ranks, cfg.Micro, func(r int) int { return cfg.Ranks - r })
	p.Ranks, err = zbFill(p.Placement, cfg.Micro, skel, cfg.Ranks)
	if err != nil {
		return ir.Program{}, err
	}
	return p, nil
}

// zbOneStageSkeleton returns the F/I skeleton of a one-stage-per-rank
// schedule: warm(r) forwards on rank r (capped at M), then I(r, i) and
// F(r, w+i) alternating, then the remaining I's.
func zbOneStageSkeleton(ranks, m int, warm func(r int) int) [][]ir.Step {
	skel := make([][]ir.Step, ranks)
	for r := range skel {
		w := max(1, min(m, warm(r)))
		steps := make([]ir.Step, 0, 2*m)
		for i := 0; i < w; i++ {
			steps = append(steps, ir.Compute(ir.Forward, r, i))
		}
		for i := 0; i < m-w; i++ {
			steps = append(steps, ir.Compute(ir.BackwardInput, r, i), ir.Compute(ir.Forward, r, w+i))
		}
		for i := m - w; i < m; i++ {
			steps = append(steps, ir.Compute(ir.BackwardInput, r, i))
		}
		skel[r] = steps
	}
	return skel
}

// zbCheckSizes checks the V a zero-bubble family needs (want; 0: any, as
// Normalize checked it) and rejects the less-memory option, which only
// interleaved-zb takes (it checks that itself). P, V, M ≥ 1 and the size
// limits are Normalize's, which every Family.Build runs first.
func zbCheckSizes(name string, cfg ir.Config, want int) error {
	if want != 0 && cfg.Virtual != want {
		return &ConstraintError{Schedule: name, Param: "virtual", Value: cfg.Virtual, Want: zbVirtualWant(name, want)}
	}
	if cfg.Options.LessMemory && name != interleavedZBName {
		return &ConstraintError{Schedule: name, Param: "less-memory", Value: 1, Got: "on",
			Want: "less-memory off; among the zero-bubble families it applies to interleaved-zb only (which it keeps at PyTorch's memory)"}
	}
	return nil
}

func zbVirtualWant(name string, want int) string {
	if want == 1 {
		return fmt.Sprintf("virtual = 1 (%s holds one stage per rank; use interleaved-zb for V > 1)", name)
	}
	return fmt.Sprintf("virtual = %d (%s holds two stages per rank)", want, name)
}

// zbLoopProgram validates cfg for a family on the loop placement with V
// stages per rank (want = 0: any V) and returns an empty program.
func zbLoopProgram(name string, cfg ir.Config, want int) (ir.Program, error) {
	if err := zbCheckSizes(name, cfg, want); err != nil {
		return ir.Program{}, err
	}
	pl := ir.Loop(cfg.Ranks, cfg.Virtual)
	if err := zbCheckPlacement(name, cfg, pl, fmt.Sprintf("loop (stage s on rank s mod %d)", cfg.Ranks)); err != nil {
		return ir.Program{}, err
	}
	return ir.NewProgram(pl, cfg.Micro), nil
}

// zbVProgram validates cfg for a family on the V placement (two stages per
// rank: r and 2P-1-r) and returns an empty program.
func zbVProgram(name string, cfg ir.Config) (ir.Program, error) {
	if err := zbCheckSizes(name, cfg, 2); err != nil {
		return ir.Program{}, err
	}
	pl := ir.VShape(cfg.Ranks)
	if err := zbCheckPlacement(name, cfg, pl, fmt.Sprintf("v (rank r holds stages r and %d-r)", 2*cfg.Ranks-1)); err != nil {
		return ir.Program{}, err
	}
	return ir.NewProgram(pl, cfg.Micro), nil
}

// zbCheckPlacement rejects a placement override other than pl.
func zbCheckPlacement(name string, cfg ir.Config, pl ir.Placement, words string) error {
	if cfg.Placement == nil || (cfg.Placement.NumRanks == pl.NumRanks && slices.Equal(cfg.Placement.RankOf, pl.RankOf)) {
		return nil
	}
	return &ConstraintError{Schedule: name, Param: "placement", Got: cfg.Placement.String(),
		Want: fmt.Sprintf("%s; %s supports only that placement", words, name)}
}

// zbFill completes per-rank skeletons of forwards (F) and input-gradient
// backwards (I) into full orders by placing the weight-gradient step W of
// every I. It runs the skeletons in unit time (F = I = W = 1, no comm cost),
// each rank in skeleton order, and decides at every unit:
//
//   - before a forward while the rank holds limit or more live chunks (F run,
//     W not yet run), it runs its oldest pending W (if any);
//   - when its next skeleton step cannot start yet (a neighbour has not
//     produced its input or gradient), it runs its oldest pending W instead
//     of idling;
//   - W's left when the skeleton is done run at the end, oldest first.
//
// W's therefore fill what would be bubbles and never delay an I, the step the
// other ranks wait for. The result keeps the skeleton's relative order, so it
// is deadlock-free whenever the skeleton is; a skeleton that deadlocks is
// reported as an error (a bug in the family, never user input).
func zbFill(pl ir.Placement, m int, skel [][]ir.Step, limit int) ([][]ir.Step, error) {
	stages := pl.Stages()
	const notYet = -1
	endF := make([]int, stages*m) // unit at which F(s, m) ended, notYet before
	endI := make([]int, stages*m)
	for i := range endF {
		endF[i], endI[i] = notYet, notYet
	}
	done := func(end []int, s, mb, t int) bool { e := end[s*m+mb]; return e != notYet && e <= t }
	// A skeleton step is ready when the F's and I's it consumes (deps.Of:
	// F(s-1) for an F, F(s) and I(s+1) for an I) have ended.
	dp := ir.Program{Placement: pl, Micro: m}
	var ins []deps.Input
	ready := func(st ir.Step, t int) bool {
		if st.Kind != ir.Forward && st.Kind != ir.BackwardInput {
			return false
		}
		ins = deps.Of(&dp, &st, ins[:0])
		for _, in := range ins {
			switch in.What {
			case deps.Activation, deps.Saved:
				if !done(endF, in.Stage, in.Micro, t) {
					return false
				}
			case deps.Gradient: // the skeleton's backwards are I's
				if !done(endI, in.Stage, in.Micro, t) {
					return false
				}
			}
		}
		return true
	}
	ranks := len(skel)
	if ranks != pl.Ranks() {
		return nil, fmt.Errorf("schedules: skeleton has %d ranks, the placement %d; this is a bug in the family", ranks, pl.Ranks())
	}
	out := make([][]ir.Step, ranks)
	next := make([]int, ranks)          // index of the rank's next skeleton step
	pending := make([][]ir.Step, ranks) // W's whose I ran, oldest first
	live := make([]int, ranks)
	left := 0
	for r, steps := range skel {
		left += len(steps)
		for _, st := range steps {
			if (st.Kind != ir.Forward && st.Kind != ir.BackwardInput) || st.Micro < 0 || st.Micro >= m || pl.Rank(st.Stage) != r {
				return nil, fmt.Errorf("schedules: skeleton step %s on rank %d is not an F or I of a stage on that rank and a micro-batch below %d; this is a bug in the family", st, r, m)
			}
			if st.Kind == ir.BackwardInput {
				left++
			}
		}
		out[r] = make([]ir.Step, 0, len(steps)*3/2)
	}
	// Only ranks that may act at unit t are visited: those whose step ended at
	// t, and the neighbours whose next step may have waited for it. A rank
	// that idles waits for an F or I of a neighbour stage and is woken by it.
	awake := make([]int, 0, ranks)
	for r := range skel {
		awake = append(awake, r)
	}
	queued := make([]int, ranks) // last unit each rank was queued for, +1
	wake := func(list []int, r, t int) []int {
		if r >= 0 && queued[r] != t+1 {
			queued[r] = t + 1
			list = append(list, r)
		}
		return list
	}
	for t := 0; left > 0; t++ {
		if len(awake) == 0 {
			// Every step takes one unit, so nothing is in flight: no rank can ever move again.
			waiting := make([]string, 0, ranks)
			for r := range skel {
				if next[r] < len(skel[r]) {
					waiting = append(waiting, fmt.Sprintf("rank %d at %s", r, skel[r][next[r]]))
				}
			}
			return nil, fmt.Errorf("schedules: skeleton deadlocks at unit %d (%v); this is a bug in the family", t, waiting)
		}
		var woken []int
		for _, r := range awake {
			var st ir.Step
			runW := false
			switch {
			case next[r] < len(skel[r]):
				s := skel[r][next[r]]
				switch {
				case s.Kind == ir.Forward && live[r] >= limit && len(pending[r]) > 0:
					runW = true
				case ready(s, t):
					st = s
					next[r]++
				case len(pending[r]) > 0:
					runW = true
				default:
					continue
				}
			case len(pending[r]) > 0:
				runW = true
			default:
				continue
			}
			if runW {
				st = pending[r][0]
				pending[r] = pending[r][1:]
			}
			left--
			out[r] = append(out[r], st)
			woken = wake(woken, r, t+1)
			switch st.Kind {
			case ir.Forward:
				endF[st.Stage*m+st.Micro] = t + 1
				live[r]++
				woken = wake(woken, pl.Rank(st.Stage+1), t+1)
			case ir.BackwardInput:
				endI[st.Stage*m+st.Micro] = t + 1
				pending[r] = append(pending[r], ir.Compute(ir.BackwardWeight, st.Stage, st.Micro))
				woken = wake(woken, pl.Rank(st.Stage-1), t+1)
			case ir.BackwardWeight:
				live[r]--
			}
		}
		awake = woken
	}
	return out, nil
}
