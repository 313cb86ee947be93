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
	sortedSum  = pipetest.SortedSum

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

// The steps of the tests' programs, by the names of their schedule text.
var (
	load      = func(stage, micro, slot int) pipe.Op { return local(pipe.OpDataLoad, stage, micro, slot, -1) }
	fwd       = func(stage, micro, slot, src int) pipe.Op { return local(pipe.OpForward, stage, micro, slot, src) }
	bwd       = func(stage, micro, slot, src int) pipe.Op { return local(pipe.OpBackward, stage, micro, slot, src) }
	bwdInput  = func(stage, micro, slot, src int) pipe.Op { return local(pipe.OpBackwardInput, stage, micro, slot, src) }
	bwdWeight = func(stage, micro, slot int) pipe.Op { return local(pipe.OpBackwardWeight, stage, micro, slot, -1) }
	recvAct   = commOf(pipe.OpRecvF)
	sendAct   = commOf(pipe.OpSendF)
	recvGrad  = commOf(pipe.OpRecvB)
	sendGrad  = commOf(pipe.OpSendB)
	recvData  = commOf(pipe.OpDataRecv)
	sendData  = commOf(pipe.OpDataSend)
	mpipeRecv = commOf(pipe.OpMpipeRecv)
	mpipeSend = commOf(pipe.OpMpipeSend)
)

// commOf returns the constructor of transfers of kind k: (stage, micro, peer, slot).
func commOf(k pipe.OpKind) func(stage, micro, peer, slot int) pipe.Op {
	return func(stage, micro, peer, slot int) pipe.Op { return comm(k, stage, micro, peer, slot) }
}

const lr = pipetest.LR
