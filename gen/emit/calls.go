package emit

import (
	"fmt"
	"strconv"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

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
	if a.kind.IsOverlap() || b.kind.IsOverlap() || a.stage != b.stage || a.micro != b.micro || a.slot != b.slot {
		return Fusion{}, false
	}
	for _, f := range fusions {
		if f.First == a.kind && f.Second == b.kind {
			if b.kind.Shape() == abi.ArgsCompute && b.src != ir.None {
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
func resolveOverlap(st ir.Step, leaf func(sub ir.Step) (op, error)) (op, error) {
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
	o := op{method: st.Kind.Method(), kind: st.Kind, stage: ir.None, micro: ir.None, peer: ir.None, slot: ir.None, src: ir.None, sub: make([]op, 2)}
	for k, s := range st.Sub {
		so, err := leaf(s)
		if err != nil {
			return op{}, fmt.Errorf("sub-step %s: %w", s, err)
		}
		o.sub[k] = so
	}
	return o, nil
}

// overlapCall returns the code of an overlap call:
// x.Method([pipe.OpKind,] stage, micro, slot, src, ...) per sub-step, the
// kind named for the sub-steps that are not F.
func (o op) overlapCall() []byte {
	code := append([]byte("x."), o.method...)
	code = append(code, '(')
	for i, s := range o.sub {
		if i > 0 {
			code = append(code, ", "...)
		}
		if s.kind != ir.Forward {
			code = append(append(append(code, "pipe.Op"...), s.kind.GoName()...), ", "...)
		}
		src := s.src
		if s.kind.Shape() != abi.ArgsCompute {
			src = ir.None // W: no source
		}
		for j, v := range [4]int{s.stage, s.micro, s.slot, src} {
			if j > 0 {
				code = append(code, ", "...)
			}
			code = strconv.AppendInt(code, int64(v), 10)
		}
	}
	return append(code, ')')
}
