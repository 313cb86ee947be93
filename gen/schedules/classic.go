package schedules

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
)

// This file holds what the classic families (gpipe, 1f1b, interleaved,
// looped-bfs) share: validation of the values they all need and the loop
// placement they all use.

// classicProgram returns an empty program with M micro-batches on the loop
// placement (stage s on rank s mod P), refusing any other placement; with
// tables (gpipe and 1f1b, one stage per rank), also on any placement of one
// stage per rank: the order is the same, stage by stage. Build has checked
// P, V, M ≥ 1 and the size limits (Normalize).
func classicProgram(name string, cfg ir.Config, tables bool) (ir.Program, error) {
	pl := ir.Loop(cfg.Ranks, cfg.Virtual)
	if cfg.Placement != nil && (cfg.Placement.NumRanks != pl.NumRanks || !slices.Equal(cfg.Placement.RankOf, pl.RankOf)) {
		if tables && cfg.Virtual == 1 && cfg.Placement.NumRanks == cfg.Ranks && cfg.Placement.Virtual() == 1 {
			return ir.NewProgram(*cfg.Placement, cfg.Micro), nil
		}
		want := fmt.Sprintf("loop (stage s on rank s mod %d); %s supports only the loop placement", cfg.Ranks, name)
		if tables {
			want = fmt.Sprintf("loop, or a table of one stage on each of the %d ranks (a permutation of 0..%d, e.g. %s)", cfg.Ranks, cfg.Ranks-1, reversedRanks(cfg.Ranks))
		}
		return ir.Program{}, &ConstraintError{Schedule: name, Param: "placement", Got: cfg.Placement.String(), Want: want}
	}
	return ir.NewProgram(pl, cfg.Micro), nil
}

// reversedRanks is the table P-1,...,1,0 for messages (elided past 8 ranks).
func reversedRanks(p int) string {
	var parts []string
	for r := p - 1; r >= 0; r-- {
		if p > 8 && r == p-3 {
			parts = append(parts, "...")
			r = 1
		}
		parts = append(parts, strconv.Itoa(r))
	}
	return strings.Join(parts, ",")
}

// classicStage is the stage rank r holds in a program of one stage per rank.
func classicStage(p ir.Program, r int) int { return p.Placement.StagesOf(r)[0] }

// oneStagePerRank builds the order of a family that holds one stage per
// rank (gpipe, 1f1b), after checking the placement, V = 1 and no
// less-memory: the rank of stage s runs warmup(s) forwards, then
// alternates a backward and the next forward, then runs the backwards
// left, each in micro-batch order. GPipe's warm-up is every forward (M),
// 1F1B's min(M, P-s).
func oneStagePerRank(name string, cfg ir.Config, warmup func(s int) int) (ir.Program, error) {
	p, err := classicProgram(name, cfg, true)
	if err != nil {
		return ir.Program{}, err
	}
	if err := classicOneStage(name, cfg); err != nil {
		return ir.Program{}, err
	}
	if err := classicNoLessMemory(name, cfg); err != nil {
		return ir.Program{}, err
	}
	m := cfg.Micro
	for r := range p.Ranks {
		s := classicStage(p, r)
		w := min(m, warmup(s))
		steps := make([]ir.Step, 0, 2*m)
		for i := 0; i < w; i++ {
			steps = append(steps, classicFwd(s, i))
		}
		for i := 0; i < m-w; i++ {
			steps = append(steps, classicBwd(s, i), classicFwd(s, w+i))
		}
		for i := m - w; i < m; i++ {
			steps = append(steps, classicBwd(s, i))
		}
		p.Ranks[r] = steps
	}
	return p, nil
}

// classicOneStage rejects V > 1 for the families that hold one stage per rank.
func classicOneStage(name string, cfg ir.Config) error {
	if cfg.Virtual != 1 {
		return &ConstraintError{Schedule: name, Param: "virtual", Value: cfg.Virtual,
			Want: "virtual = 1 (use interleaved or looped-bfs for V > 1)"}
	}
	return nil
}

// classicNoLessMemory rejects the less-memory option on families whose order it
// does not shape, so that a user never believes it took effect.
func classicNoLessMemory(name string, cfg ir.Config) error {
	if cfg.Options.LessMemory {
		return &ConstraintError{Schedule: name, Param: "less-memory", Value: 1, Got: "on",
			Want: "less-memory off; it shapes the warm-up of interleaved only"}
	}
	return nil
}

// classicFwd and classicBwd are shorthands for the compute steps the classic families emit.
func classicFwd(stage, micro int) ir.Step { return ir.Compute(ir.Forward, stage, micro) }
func classicBwd(stage, micro int) ir.Step { return ir.Compute(ir.Backward, stage, micro) }
