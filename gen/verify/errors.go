package verify

import (
	"fmt"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
)

// Code classifies an *Error.
type Code uint8

// The error codes.
const (
	Structure Code = iota + 1 // malformed step: kind, range, placement, peer, overlap shape
	Duplicate                 // a step that may run once runs again
	Missing                   // a (stage, micro) lacks its F or backward
	Order                     // a step runs before what it needs (its input, producer, I, ...)
	Unmatched                 // a transfer without a partner
	Mismatch                  // FIFO pairs a transfer with the wrong partner
	Memory                    // more live activations than allowed
	Slot                      // slot assignment inconsistent or overlapping
	FSDP                      // a stage computes sharded, or UNSHARD/RESHARD/REDUCE_GRAD out of order
)

var codeNames = [...]string{"", "structure", "duplicate", "missing", "order", "unmatched", "mismatch", "memory", "slot", "fsdp"}

func (c Code) String() string {
	if int(c) < len(codeNames) && c > 0 {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", uint8(c))
}

// Error is a rejected step: rank Rank, index Index in that rank's program,
// the step itself, and why. Index is -1 when the problem is a step that is
// missing (Step then is the missing one); Rank is -1 for whole-program problems.
type Error struct {
	Rank   int
	Index  int
	Step   ir.Step
	Code   Code
	Reason string
}

// Malformed reports whether e says the program is not one ppgen can reason
// about at all, rather than one that runs unsafely: a malformed step
// (Structure: a stage, micro-batch or rank outside the program, an overlap
// of the wrong shape, a wrong peer). Other errors, deadlocks and a chunk
// on a micro-batch's route without its forward or backward (Missing F, B
// or W: a training step that would leave gradients uncomputed) included,
// are about a well-formed program that is unsafe to run.
func (e *Error) Malformed() bool {
	return e.Code == Structure
}

func (e *Error) Error() string {
	switch {
	case e.Rank < 0:
		return "program: " + e.Reason
	case e.Index < 0:
		return fmt.Sprintf("rank %d (%s): %s", e.Rank, e.Step, e.Reason)
	}
	return fmt.Sprintf("rank %d step %d (%s): %s", e.Rank, e.Index, e.Step, e.Reason)
}

// Blocked is one rank of a deadlock: where it is stuck and on whom.
type Blocked struct {
	Rank int
	// Index and Step: the step the rank is blocked on, the head of its comm
	// stream (a posted transfer waiting for its partner) or, in a compute-only
	// program, the compute step waiting for its input.
	Index int
	Step  ir.Step
	// Peer is the rank it waits for.
	Peer int
	// Host and HostStep: where the rank's host thread is (blocked on a
	// compute step, or -1 when it ran all of its steps).
	Host     int
	HostStep ir.Step
	// On is, in a compute-only program, the peer's step it waits for.
	On ir.Step
}

// DeadlockError reports a program that hangs under the strict model: the
// ranks of Cycle each wait for the next, the last for the first.
type DeadlockError struct {
	Cycle []Blocked
	// Compute is true for a compute-only program (waits are on compute
	// steps of other ranks, not on transfers).
	Compute bool
}

func (e *DeadlockError) Error() string {
	var b strings.Builder
	b.WriteString("deadlock: ")
	for i, w := range e.Cycle {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "rank %d at step %d %s waits for rank %d", w.Rank, w.Index, w.Step, w.Peer)
		if e.Compute && w.On.Kind != ir.Invalid {
			fmt.Fprintf(&b, " (%s)", w.On)
		}
	}
	var kinds []ir.Kind
	for _, w := range e.Cycle {
		kinds = append(kinds, w.Step.Kind, w.HostStep.Kind)
	}
	hint := hintFor(kinds...)
	switch {
	case hint != "":
		b.WriteString(" (" + hint + ")")
	case e.Compute:
		b.WriteString(" (the compute orders form a dependency cycle across ranks)")
	default:
		b.WriteString(" (each comm stream runs in order and a transfer completes only when both ends reach it; reorder the transfers or post the receive earlier)")
	}
	return b.String()
}
