package emit

import "github.com/ppgen/ppgen/gen/ir"

// shape is the argument list a runtime call takes; every argument is an int
// constant taken from the step (and, for compute, its src slot).
type shape uint8

const (
	argsNone    shape = iota // ()
	argsLocal                // (stage, micro, slot)
	argsComm                 // (stage, micro, peer, slot)
	argsCompute              // (stage, micro, slot, src)
)

// call says how one step kind is emitted: the pipe.Exec method of the
// generated call and the pipe.OpKind constant of its table entry.
type call struct {
	method string
	op     string
	args   shape
}

// calls is the step kind -> runtime call table (docs/internals.md, "The
// runtime API generated code calls"). A kind missing here has no runtime call
// yet and Emit rejects it; supporting a new kind is one entry.
var calls = map[ir.Kind]call{
	ir.DataLoad:       {"DataLoad", "OpDataLoad", argsLocal},
	ir.RecvF:          {"RecvAct", "OpRecvAct", argsComm},
	ir.SendF:          {"SendAct", "OpSendAct", argsComm},
	ir.RecvB:          {"RecvGrad", "OpRecvGrad", argsComm},
	ir.SendB:          {"SendGrad", "OpSendGrad", argsComm},
	ir.Forward:        {"Forward", "OpForward", argsCompute},
	ir.Backward:       {"Backward", "OpBackward", argsCompute},
	ir.BackwardInput:  {"BackwardInput", "OpBackwardInput", argsCompute},
	ir.BackwardWeight: {"BackwardWeight", "OpBackwardWeight", argsLocal},
	ir.OptStep:        {"OptStep", "OpOptStep", argsNone},
}
