package pipe

import (
	"fmt"

	"github.com/ppgen/ppgen/abi"
)

// The interpreter: a rank's program as data ([]Op, e.g. from DecodeOps)
// run through the packed step methods generated code calls.

// Interpret runs ops, a rank's program as data, through the same methods the
// generated code calls, and returns x.Err() (like a generated RankN).
func Interpret(x *Exec, ops []Op) error {
	for i := 0; i < len(ops); i++ {
		if x.failedNow() {
			break
		}
		op := &ops[i]
		// The methods generated code calls, from the tables kinds_gen.go
		// builds from abi's rows (one load and an indirect call per step,
		// where a switch over two dozen kinds costs a chain of compares or
		// a jump table and then the call); an op whose fields have no At is
		// reported by unpackable. abi says which operands a kind packs
		// (AtFields) and whether it has an At at all.
		sh := op.Kind.Shape()
		c, d := op.Slot, int32(-1) // AtFields, on the op's int32 fields
		switch sh {
		case abi.ArgsComm:
			c, d = op.Peer, op.Slot
		case abi.ArgsCompute:
			d = op.Src
		}
		a, ok := PackAt(int(op.Stage), int(op.Micro), int(c), int(d))
		if !ok && sh.Packed() {
			x.unpackable(op.Kind, int(op.Stage), int(op.Micro), int(c), int(d))
			continue
		}
		if f := packedSteps[op.Kind]; f != nil {
			f(x, a)
			continue
		}
		if f := stageSteps[op.Kind]; f != nil {
			f(x, int(op.Stage))
			continue
		}
		if f := bareSteps[op.Kind]; f != nil {
			f(x)
			continue
		}
		if sh == abi.ArgsOverlap && op.Kind.Valid() {
			a, b, ok := overlapSubOps(x, ops, i)
			if !ok {
				return x.Err()
			}
			x.runOverlapOps(op.Kind, *a, *b)
			i += 2
		} else {
			x.fail(&StepError{Rank: x.rank, Step: fmt.Sprintf("op #%d", i), Peer: -1, Err: fmt.Errorf("unknown op kind %d", uint8(op.Kind))})
		}
	}
	return x.Err()
}

// unpackable reports a step (an Op, or an overlap's sub-step) with an
// argument that has no At field: below -1 or above 65534, so outside every
// valid Spec. It names the argument as the slow paths would.
func (x *Exec) unpackable(k OpKind, stage, micro, c, d int) {
	if x.failedNow() {
		return
	}
	slot, peer, src := c, -1, d
	comm, other := true, stage+1 // other: the neighbour stage of a transfer
	switch k {
	case OpRecvF, OpSendB:
		slot, peer, src, other = d, c, -1, stage-1
	case OpSendF, OpRecvB:
		slot, peer, src = d, c, -1
	default:
		comm = false
	}
	switch {
	case !x.valid(stage, micro, slot):
		x.badArgs(k, stage, micro, slot, peer)
	case comm && !x.checkPeer(k, stage, micro, peer, other):
	case src < -1 || src >= len(x.slots):
		x.stepFailf(k, stage, micro, peer, "source slot %d invalid (slot %d, %d slots)", src, slot, len(x.slots))
	default:
		x.stepFailf(k, stage, micro, peer, "arguments (%d, %d, %d, %d) outside what any step can take", stage, micro, c, d)
	}
}
