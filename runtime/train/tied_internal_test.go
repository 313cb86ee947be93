package train

import (
	"testing"

	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// TestTiedStageRecomputable: a tie's stage passes pipe.Recomputable on
// from the stage it wraps (an nn.Sequential), stays pipe.Tied, and claims
// neither Recomputable for a stage without it.
func TestTiedStageRecomputable(t *testing.T) {
	seq := nn.NewSequential(nn.Tanh{}, nn.Tanh{})
	st := newTiedStage(seq, nil)
	rs, ok := st.(pipe.Recomputable)
	if !ok {
		t.Fatalf("the tied stage of a *nn.Sequential is a %T, no pipe.Recomputable", st)
	}
	if _, ok := st.(pipe.Tied); !ok {
		t.Fatalf("the tied stage is a %T, no pipe.Tied", st)
	}
	if err := rs.Select(0.5, nil); err != nil {
		t.Fatalf("Select through the tied stage: %v", err)
	}
	plain := newTiedStage(struct{ nn.ParamStage }{seq}, nil)
	if _, ok := plain.(pipe.Recomputable); ok {
		t.Fatalf("the tied stage of a stage without Select, Drop and Rebuild is a %T, which claims pipe.Recomputable", plain)
	}
}
