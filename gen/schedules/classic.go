package schedules

import (
	"fmt"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
)

// This file holds what the classic families (gpipe, 1f1b, interleaved,
// looped-bfs) share: validation of the values they all need and the loop
// placement they all use.

// classicProgram checks the values every classic family needs (P, V, M ≥ 1,
// within the size limits of checkSize, no placement other than loop) and returns an empty
// program with the loop placement (stage s on rank s mod P) and M micro-batches.
// Build functions call it so that they never panic on user input even when
// called without Normalize.
func classicProgram(name string, cfg ir.Config) (ir.Program, error) {
	switch {
	case cfg.Ranks < 1:
		return ir.Program{}, &ConstraintError{Schedule: name, Param: "ranks", Value: cfg.Ranks, Want: "at least 1 rank"}
	case cfg.Virtual < 1:
		return ir.Program{}, &ConstraintError{Schedule: name, Param: "virtual", Value: cfg.Virtual, Want: "at least 1 stage per rank"}
	case cfg.Micro < 1:
		return ir.Program{}, &ConstraintError{Schedule: name, Param: "micro", Value: cfg.Micro, Want: "at least 1 micro-batch"}
	}
	if err := checkSize(name, cfg); err != nil {
		return ir.Program{}, err
	}
	pl := ir.Loop(cfg.Ranks, cfg.Virtual)
	if cfg.Placement != nil && (cfg.Placement.NumRanks != pl.NumRanks || !slices.Equal(cfg.Placement.RankOf, pl.RankOf)) {
		return ir.Program{}, &ConstraintError{Schedule: name, Param: "placement", Got: cfg.Placement.String(),
			Want: fmt.Sprintf("loop (stage s on rank s mod %d); %s supports only the loop placement", cfg.Ranks, name)}
	}
	return ir.NewProgram(pl, cfg.Micro), nil
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
