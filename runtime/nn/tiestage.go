package nn

import (
	"fmt"

	"gorgonia.org/tensor"
)

// TiedStage is a pipeline stage that holds one copy of parameters tied to
// another stage's (`ppgen gen -tie A:B`: an embedding on the first stage
// and the LM head on the last sharing one weight). It is the stage (a
// Sequential, say: its Forward and backward calls pass through) and
// implements runtime/pipe's Tied structurally: TiedGrads returns the tied
// parameters' gradients, which the runtime's TIE_GRAD replaces with the sum
// of both copies' before the optimizer step. The two stages of a tie list
// their copies in the same order, with the same shapes, and start from the
// same values; then both take the same step and stay one parameter.
type TiedStage struct {
	Layer
	tied []*Param
}

// Tie returns stage l with params declared tied: each must be one of l's
// own parameters (the same pointer as in l.Params()), listed once.
func Tie(l Layer, params ...*Param) (*TiedStage, error) {
	if l == nil {
		return nil, fmt.Errorf("nn: Tie: nil stage")
	}
	if len(params) == 0 {
		return nil, fmt.Errorf("nn: Tie: no parameters; name the stage's tied parameters (e.g. its embedding's weight)")
	}
	own := map[*Param]bool{}
	for _, p := range l.Params() {
		own[p] = true
	}
	seen := map[*Param]bool{}
	for i, p := range params {
		if err := checkParam("Tie", p); err != nil {
			return nil, err
		}
		switch {
		case !own[p]:
			return nil, fmt.Errorf("nn: Tie: parameter %d (%q) is not one of the stage's parameters; pass the stage's own *Param (from its layers or Params())", i, p.Name)
		case seen[p]:
			return nil, fmt.Errorf("nn: Tie: parameter %q is listed twice", p.Name)
		}
		seen[p] = true
	}
	return &TiedStage{Layer: l, tied: append([]*Param(nil), params...)}, nil
}

// TiedParams returns the tied parameters, in the order Tie was given them.
func (t *TiedStage) TiedParams() []*Param { return append([]*Param(nil), t.tied...) }

// TiedGrads returns the gradients of the tied parameters, in the order Tie
// was given them (pipe.Tied).
func (t *TiedStage) TiedGrads() []*tensor.Dense {
	gs := make([]*tensor.Dense, len(t.tied))
	for i, p := range t.tied {
		gs[i] = p.Grad
	}
	return gs
}
