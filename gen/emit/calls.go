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
	Args   Shape
}

// Calls returns the step kind -> runtime call table in kind order, for tools
// that read generated code back (gen/vet).
func Calls() []Call {
	out := make([]Call, 0, len(calls))
	for _, k := range ir.Kinds() {
		if c, ok := calls[k]; ok {
			out = append(out, Call{Kind: k, Method: c.method, Packed: c.packed, Op: c.op, Args: c.args})
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
}

// calls is the step kind -> runtime call table (docs/internals.md, "The
// runtime API generated code calls"). A kind missing here has no runtime call
// yet and Emit rejects it; supporting a new kind is one entry.
var calls = map[ir.Kind]call{
	ir.DataLoad:       {"DataLoad", "OpDataLoad", ArgsLocal, "Load"},
	ir.RecvF:          {"RecvAct", "OpRecvAct", ArgsComm, "RecvF"},
	ir.SendF:          {"SendAct", "OpSendAct", ArgsComm, "SendF"},
	ir.RecvB:          {"RecvGrad", "OpRecvGrad", ArgsComm, "RecvB"},
	ir.SendB:          {"SendGrad", "OpSendGrad", ArgsComm, "SendB"},
	ir.Forward:        {"Forward", "OpForward", ArgsCompute, "F"},
	ir.Backward:       {"Backward", "OpBackward", ArgsCompute, "B"},
	ir.BackwardInput:  {"BackwardInput", "OpBackwardInput", ArgsCompute, "I"},
	ir.BackwardWeight: {"BackwardWeight", "OpBackwardWeight", ArgsLocal, "W"},
	ir.OptStep:        {"OptStep", "OpOptStep", ArgsNone, ""},
	ir.OverlapFB:      {"OverlapFB", "OpOverlapFB", ArgsOverlap, ""},
	ir.OverlapBF:      {"OverlapBF", "OpOverlapBF", ArgsOverlap, ""},
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
