package ir

import (
	"fmt"

	"github.com/ppgen/ppgen/abi"
)

// The limits on the size of a program. Every schedule ppgen builds or reads
// is checked against them before anything sized by its numbers is
// allocated, so that no schedule file or flag can exhaust memory: a
// program within them lowers, verifies, simulates and emits in seconds and
// well under 1 GB.
const (
	// MaxIndex is the largest stage, micro-batch or rank number a step may
	// name, so a program has at most MaxIndex+1 (65535) stages,
	// micro-batches and ranks: the limit of the packed step argument
	// (abi.At: 16-bit fields, 0xffff standing for -1), abi.MaxIndex.
	MaxIndex = abi.MaxIndex
	// MaxChunks bounds stages × micro-batches: the (stage, micro-batch)
	// chunks whose tables verify, the passes and the simulator allocate.
	// Each chunk becomes a handful of steps, and a generated file a few
	// calls per step; 32768 chunks (32 ranks × 4 stages each × 256
	// micro-batches) is far beyond any schedule worth compiling to
	// straight-line code, and every command finishes within seconds and
	// 1 GB on a program of that size.
	MaxChunks = 1 << 15
	// MaxSteps bounds the steps of a program, all ranks together: the
	// readers stop there and verify refuses more. It is 32 per chunk at
	// MaxChunks; a lowered program with FSDP and swap steps has about 15.
	MaxSteps = 32 * MaxChunks
	// MaxLineBytes bounds one line of a schedule file (text or CSV).
	MaxLineBytes = 16 << 20
	// MaxStepBytes bounds one step (cell) of a schedule file; the longest
	// valid step, an overlap of two steps with five-digit numbers, has 37.
	MaxStepBytes = 128
)

// LimitError reports a program, or a request for one, outside a size limit.
type LimitError struct {
	What  string // "ranks", "stages", "micro-batches", "stages × micro-batches", "steps", ...
	Value int64  // the value asked for
	Min   int64  // the least allowed
	Max   int64  // the most allowed
	Hint  string // what to do, may be empty
}

func (e *LimitError) Error() string {
	var s string
	if e.Value < e.Min {
		s = fmt.Sprintf("%s = %d; want at least %d", e.What, e.Value, e.Min)
	} else {
		s = fmt.Sprintf("%s = %d is over the limit of %d", e.What, e.Value, e.Max)
	}
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// CheckSize checks a program shape against the limits before it is built:
// 1 ≤ ranks, stages, micro ≤ MaxIndex+1 and stages × micro ≤ MaxChunks.
// The product is computed so that it cannot overflow. Its errors are
// *LimitError.
func CheckSize(ranks, stages, micro int) error {
	const hint = "runtime/pipe numbers ranks, stages and micro-batches in 16 bits"
	for _, c := range []struct {
		what string
		v    int
	}{{"ranks", ranks}, {"stages", stages}, {"micro-batches", micro}} {
		if c.v < 1 {
			return &LimitError{What: c.what, Value: int64(c.v), Min: 1, Max: MaxIndex + 1}
		}
		if c.v > MaxIndex+1 {
			return &LimitError{What: c.what, Value: int64(c.v), Min: 1, Max: MaxIndex + 1, Hint: hint}
		}
	}
	if stages > MaxChunks/micro {
		return &LimitError{What: fmt.Sprintf("stages × micro-batches (%d × %d)", stages, micro), Value: int64(stages) * int64(micro), Min: 1, Max: MaxChunks,
			Hint: "the (stage, micro-batch) chunks; use fewer micro-batches or stages"}
	}
	return nil
}
