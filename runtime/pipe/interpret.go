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
		// The packed methods, as generated code calls them; an op whose
		// fields have no At is reported by unpackable. abi says which
		// operands a kind packs (AtFields) and whether it has an At at all.
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
		switch op.Kind {
		case OpDataLoad:
			x.Load(a)
		case OpRecvAct:
			x.RecvF(a)
		case OpSendAct:
			x.SendF(a)
		case OpRecvGrad:
			x.RecvB(a)
		case OpSendGrad:
			x.SendB(a)
		case OpForward:
			x.F(a)
		case OpBackward:
			x.B(a)
		case OpBackwardInput:
			x.I(a)
		case OpBackwardWeight:
			x.W(a)
		case OpOptStep:
			x.OptStep()
		case OpUnshard:
			x.Unshard(int(op.Stage))
		case OpReshard:
			x.Reshard(int(op.Stage))
		case OpReduceGrad:
			x.ReduceGrad(int(op.Stage))
		case OpSwapLaunchOffload:
			x.LaunchOffload(a)
		case OpSwapWaitOffload:
			x.WaitOffload(a)
		case OpSwapLaunchLoad:
			x.LaunchLoad(a)
		case OpSwapWaitLoad:
			x.WaitLoad(a)
		case OpRecvInput:
			x.RecvInput(a)
		case OpSendInput:
			x.SendInput(a)
		case OpRecvData:
			x.RecvLabels(a)
		case OpSendData:
			x.SendLabels(a)
		case OpBatchBegin:
			x.BatchBegin()
		case OpBatchEnd:
			x.BatchEnd()
		case OpOverlapFB, OpOverlapBF:
			a, b, ok := overlapSubOps(x, ops, i)
			if !ok {
				return x.Err()
			}
			x.runOverlapOps(op.Kind, *a, *b)
			i += 2
		default:
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
	case OpRecvAct, OpSendGrad:
		slot, peer, src, other = d, c, -1, stage-1
	case OpSendAct, OpRecvGrad:
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
