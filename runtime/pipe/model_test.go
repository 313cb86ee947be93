package pipe_test

import (
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/pipe/pipetest"
)

// The test model (package pipetest) under the short names the tests use.
type (
	affine = pipetest.Affine
	mse    = pipetest.MSE
	data   = pipetest.Data
)

var (
	newStages  = pipetest.NewStages
	sequential = pipetest.Sequential
	sameFloats = pipetest.SameFloats
	like       = pipetest.Like
	sortedSum  = pipetest.SortedSum
)

var (
	inprocWorld = pipetest.InProcWorld
	tcpWorld    = pipetest.TCPWorld
)

// run runs ops through Interpret: the tests' hand-written programs are
// programs as data.
func run(x *pipe.Exec, ops ...pipe.Op) { pipe.Interpret(x, ops) }

func local(k pipe.OpKind, stage, micro, slot, src int) pipe.Op {
	return pipe.Op{Kind: k, Stage: int32(stage), Micro: int32(micro), Peer: -1, Slot: int32(slot), Src: int32(src)}
}

func comm(k pipe.OpKind, stage, micro, peer, slot int) pipe.Op {
	return pipe.Op{Kind: k, Stage: int32(stage), Micro: int32(micro), Peer: int32(peer), Slot: int32(slot), Src: -1}
}

func load(stage, micro, slot int) pipe.Op { return local(pipe.OpDataLoad, stage, micro, slot, -1) }
func fwd(stage, micro, slot, src int) pipe.Op {
	return local(pipe.OpForward, stage, micro, slot, src)
}
func bwd(stage, micro, slot, src int) pipe.Op {
	return local(pipe.OpBackward, stage, micro, slot, src)
}
func bwdInput(stage, micro, slot, src int) pipe.Op {
	return local(pipe.OpBackwardInput, stage, micro, slot, src)
}
func bwdWeight(stage, micro, slot int) pipe.Op {
	return local(pipe.OpBackwardWeight, stage, micro, slot, -1)
}
func recvAct(stage, micro, peer, slot int) pipe.Op {
	return comm(pipe.OpRecvAct, stage, micro, peer, slot)
}
func sendAct(stage, micro, peer, slot int) pipe.Op {
	return comm(pipe.OpSendAct, stage, micro, peer, slot)
}
func recvGrad(stage, micro, peer, slot int) pipe.Op {
	return comm(pipe.OpRecvGrad, stage, micro, peer, slot)
}
func sendGrad(stage, micro, peer, slot int) pipe.Op {
	return comm(pipe.OpSendGrad, stage, micro, peer, slot)
}
func recvData(stage, micro, peer, slot int) pipe.Op {
	return comm(pipe.OpRecvData, stage, micro, peer, slot)
}
func sendData(stage, micro, peer, slot int) pipe.Op {
	return comm(pipe.OpSendData, stage, micro, peer, slot)
}
func mpipeRecv(stage, micro, peer, slot int) pipe.Op {
	return comm(pipe.OpRecvInput, stage, micro, peer, slot)
}
func mpipeSend(stage, micro, peer, slot int) pipe.Op {
	return comm(pipe.OpSendInput, stage, micro, peer, slot)
}

const lr = pipetest.LR
