package emit

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/ppgen/ppgen/gen/ir"
)

// Shape is the argument list a runtime call takes; every argument is an int
// constant taken from the step (and, for compute, its src slot).
type Shape uint8

// The argument shapes of runtime calls.
const (
	ArgsNone    Shape = iota // ()
	ArgsLocal                // (stage, micro, slot)
	ArgsComm                 // (stage, micro, peer, slot)
	ArgsCompute              // (stage, micro, slot, src)
	ArgsOverlap              // the sub-steps' arguments in order: (stage, micro, slot, src) for F, (kind, stage, micro, slot, src) for B, I or W
	ArgsStage                // (stage): the FSDP steps
)

// Call is how one step kind is emitted: the pipe.Exec method of the
// generated call, the pipe.OpKind constant of its -table entry, and its
// arguments. Steps other than OPT_STEP and the overlaps are emitted as
// Packed, a method taking the arguments packed into one pipe.At constant
// (stage, micro and Args' two other fields, 16 bits each, 0xffff for -1);
// Method is the same step with the arguments unpacked, which hand-written
// code and the interpreter call.
type Call struct {
	Kind   ir.Kind
	Method string
	Packed string // "" when the step is emitted as Method
	Op     string
	Code   byte // the op's letter in a -table kinds string (pipe.DecodeOps)
	Args   Shape
}

// Calls returns the step kind -> runtime call table in kind order, for tools
// that read generated code back (gen/vet).
func Calls() []Call {
	out := make([]Call, 0, len(calls))
	for _, k := range ir.Kinds() {
		if c, ok := calls[k]; ok {
			out = append(out, Call{Kind: k, Method: c.method, Packed: c.packed, Op: c.op, Code: c.code, Args: c.args})
		}
	}
	return out
}

// call says how one step kind is emitted: the pipe.Exec method of the
// generated call and the pipe.OpKind constant of its table entry.
type call struct {
	method string
	op     string
	args   Shape
	packed string
	code   byte // the op's letter in the -table kinds string (pipe.OpKind.Code)
}

// calls is the step kind -> runtime call table (docs/internals.md, "The
// runtime API generated code calls"). A kind missing here has no runtime call
// yet and Emit rejects it; supporting a new kind is one entry.
var calls = map[ir.Kind]call{
	ir.DataLoad:          {"DataLoad", "OpDataLoad", ArgsLocal, "Load", 'L'},
	ir.RecvF:             {"RecvAct", "OpRecvAct", ArgsComm, "RecvF", 'r'},
	ir.SendF:             {"SendAct", "OpSendAct", ArgsComm, "SendF", 's'},
	ir.RecvB:             {"RecvGrad", "OpRecvGrad", ArgsComm, "RecvB", 'R'},
	ir.SendB:             {"SendGrad", "OpSendGrad", ArgsComm, "SendB", 'S'},
	ir.Forward:           {"Forward", "OpForward", ArgsCompute, "F", 'F'},
	ir.Backward:          {"Backward", "OpBackward", ArgsCompute, "B", 'B'},
	ir.BackwardInput:     {"BackwardInput", "OpBackwardInput", ArgsCompute, "I", 'I'},
	ir.BackwardWeight:    {"BackwardWeight", "OpBackwardWeight", ArgsLocal, "W", 'W'},
	ir.OptStep:           {"OptStep", "OpOptStep", ArgsNone, "", 'O'},
	ir.OverlapFB:         {"OverlapFB", "OpOverlapFB", ArgsOverlap, "", 'X'},
	ir.OverlapBF:         {"OverlapBF", "OpOverlapBF", ArgsOverlap, "", 'Y'},
	ir.Unshard:           {"Unshard", "OpUnshard", ArgsStage, "", 'U'},
	ir.Reshard:           {"Reshard", "OpReshard", ArgsStage, "", 'u'},
	ir.ReduceGrad:        {"ReduceGrad", "OpReduceGrad", ArgsStage, "", 'G'},
	ir.SwapLaunchOffload: {"SwapLaunchOffload", "OpSwapLaunchOffload", ArgsLocal, "LaunchOffload", 'J'},
	ir.SwapWaitOffload:   {"SwapWaitOffload", "OpSwapWaitOffload", ArgsLocal, "WaitOffload", 'j'},
	ir.SwapLaunchLoad:    {"SwapLaunchLoad", "OpSwapLaunchLoad", ArgsLocal, "LaunchLoad", 'K'},
	ir.SwapWaitLoad:      {"SwapWaitLoad", "OpSwapWaitLoad", ArgsLocal, "WaitLoad", 'k'},
	ir.DataRecv:          {"RecvData", "OpRecvData", ArgsComm, "RecvLabels", 'T'},
	ir.DataSend:          {"SendData", "OpSendData", ArgsComm, "SendLabels", 't'},
	ir.MpipeRecv:         {"MpipeRecv", "OpRecvInput", ArgsComm, "RecvInput", 'M'},
	ir.MpipeSend:         {"MpipeSend", "OpSendInput", ArgsComm, "SendInput", 'm'},
}

// Fusion is a pair of adjacent steps of one chunk (same stage, micro-batch
// and slot) that is emitted as one call of Method, whose pipe.At is the
// compute step's (stage, micro, slot, src), or (stage, micro, slot, -1) for
// a pair of transfers; a transfer's peer is the rank the placement puts the
// neighbour stage on, which the runtime derives. A receive fuses with the
// compute after it only when that compute consumes it (src -1).
type Fusion struct {
	First, Second ir.Kind
	Method        string
}

// fusions are the pairs Emit fuses (docs/internals.md): in a lowered
// pipeline most transfers sit next to the compute that produces or consumes
// them, and each fused pair is one call less for the Go compiler.
var fusions = []Fusion{
	{ir.Forward, ir.SendF, "FAndSend"},
	{ir.RecvF, ir.Forward, "RecvAndF"},
	{ir.RecvB, ir.Backward, "RecvAndB"},
	{ir.Backward, ir.SendB, "BAndSend"},
	{ir.RecvB, ir.BackwardInput, "RecvAndI"},
	{ir.BackwardInput, ir.SendB, "IAndSend"},
	// -ship-labels: the labels go right before the activation, same chunk
	// and peer; the At is (stage, micro, slot, -1) as for a compute step.
	{ir.DataSend, ir.SendF, "LabelsAndSendF"},
	{ir.DataRecv, ir.RecvF, "LabelsAndRecvF"},
}

// Fusions returns the fused pairs, for tools that read generated code back.
func Fusions() []Fusion { return append([]Fusion(nil), fusions...) }

// fuse returns the fused call of the adjacent ops a and b, if they fuse.
func fuse(a, b op) (Fusion, bool) {
	if a.args == ArgsOverlap || b.args == ArgsOverlap || a.stage != b.stage || a.micro != b.micro || a.slot != b.slot {
		return Fusion{}, false
	}
	for _, f := range fusions {
		if f.First == a.kind && f.Second == b.kind {
			if b.args == ArgsCompute && b.src != ir.None {
				return Fusion{}, false // the compute reads another slot, not the receive
			}
			return f, true
		}
	}
	return Fusion{}, false
}

// An overlap step is emitted as one call with the arguments of both
// sub-steps in sub-step order, the backward's kind first among its own:
//
//	x.OverlapFB(fStage, fMicro, fSlot, fSrc, pipe.OpBackward, bStage, bMicro, bSlot, bSrc)
//	x.OverlapBF(pipe.OpBackwardInput, bStage, bMicro, bSlot, bSrc, fStage, fMicro, fSlot, fSrc)
//
// (a W sub-step passes src -1), and in the -table form as three ops: a header
// {Kind: pipe.OpOverlapFB} with every other field -1, then the two sub-steps.

// resolveOverlap checks the overlap st of rank r against the runtime API and
// returns its call, sub-steps included (their src is filled later). leaf
// checks one sub-step's fields as for any compute step.
func resolveOverlap(st ir.Step, c call, leaf func(sub ir.Step) (op, error)) (op, error) {
	if len(st.Sub) != 2 {
		return op{}, fmt.Errorf("an overlap holds exactly two sub-steps, this one %d", len(st.Sub))
	}
	fi, bi := 0, 1
	if st.Kind == ir.OverlapBF {
		fi, bi = 1, 0
	}
	f, b := st.Sub[fi], st.Sub[bi]
	if f.Kind != ir.Forward || (b.Kind != ir.Backward && b.Kind != ir.BackwardInput && b.Kind != ir.BackwardWeight) {
		want := "(F;B), (F;I) or (F;W)"
		if st.Kind == ir.OverlapBF {
			want = "(B;F), (I;F) or (W;F)"
		}
		return op{}, fmt.Errorf("the runtime runs %s as %s, not (%s;%s)", st.Kind, want, st.Sub[0].Kind, st.Sub[1].Kind)
	}
	o := op{call: c, stage: ir.None, micro: ir.None, peer: ir.None, slot: ir.None, src: ir.None, sub: make([]op, 2)}
	for k, s := range st.Sub {
		so, err := leaf(s)
		if err != nil {
			return op{}, fmt.Errorf("sub-step %s: %w", s, err)
		}
		o.sub[k] = so
	}
	return o, nil
}

// overlapArgs returns the arguments of an overlap call.
func (o op) overlapArgs() []jen.Code {
	var args []jen.Code
	for _, s := range o.sub {
		if s.op != "OpForward" {
			args = append(args, jen.Qual(PipePath, s.op))
		}
		src := s.src
		if s.args == ArgsLocal {
			src = ir.None // W: no source
		}
		args = append(args, jen.Lit(s.stage), jen.Lit(s.micro), jen.Lit(s.slot), jen.Lit(src))
	}
	return args
}
