package pricing

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/sim"
)

// fourLayers is a model of four layers whose F sum to 3 and 7 over two
// even stages, with comm 0.25.
func fourLayers() *model.Model {
	return &model.Model{Comm: 0.25, Layers: []model.Layer{
		{F: 1, I: 1, W: 1, Act: 1, Params: 1}, {F: 2, I: 2, W: 2, Act: 1, Params: 1},
		{F: 3, I: 3, W: 3, Act: 1, Params: 1}, {F: 4, I: 4, W: 4, Act: 1, Params: 1},
	}}
}

// TestStages: the merge rules of -cost and -model, as Pricing states them.
func TestStages(t *testing.T) {
	for _, tc := range []struct {
		name           string
		spec           string
		model          *model.Model
		stages, copies int
		check          func(c sim.Cost) bool
		err            string
	}{
		{name: "neither: the default", stages: 4, check: func(c sim.Cost) bool {
			d := sim.DefaultCost()
			return slices.Equal(c.F, d.F) && slices.Equal(c.B, d.B) && c.Comm == 0
		}},
		{name: "-cost alone, per stage", spec: "F=1:2,comm=0.5", stages: 2, check: func(c sim.Cost) bool {
			return slices.Equal(c.F, []float64{1, 2}) && c.Comm == 0.5
		}},
		{name: "-cost alone, bad", spec: "F=x", stages: 2, err: "F"},
		{name: "-model alone", model: fourLayers(), stages: 2, check: func(c sim.Cost) bool {
			return slices.Equal(c.F, []float64{3, 7}) && slices.Equal(c.B, []float64{6, 14}) && c.Comm == 0.25
		}},
		{name: "-model, two copies", model: fourLayers(), stages: 4, copies: 2, check: func(c sim.Cost) bool {
			return slices.Equal(c.F, []float64{3, 7, 3, 7})
		}},
		{name: "-model, copies that do not divide", model: fourLayers(), stages: 3, copies: 2, err: "do not form 2 model copies"},
		{name: "-model, too many stages", model: fourLayers(), stages: 5, err: "4 layers cannot fill 5 stages"},
		{name: "-cost adds keys to -model", spec: "opt=2,data=0.5", model: fourLayers(), stages: 2, check: func(c sim.Cost) bool {
			return c.Opt == 2 && c.DataLoad == 0.5 && c.Comm == 0.25 && c.F[1] == 7
		}},
		{name: "-cost's comm overrides the model's", spec: "comm=0.5", model: fourLayers(), stages: 2, check: func(c sim.Cost) bool {
			return c.Comm == 0.5
		}},
		{name: "-cost may not give a model key", spec: "F=1", model: fourLayers(), stages: 2, err: "F is given per layer by -model m.json"},
		{name: "-cost may not give act either", spec: "act=2", model: fourLayers(), stages: 2, err: "act is given per layer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.spec, tc.model, "m.json").Stages(tc.stages, tc.copies)
			switch {
			case tc.err != "":
				var pe *Error
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err %v, want one with %q", err, tc.err)
				} else if !errors.As(err, &pe) {
					t.Errorf("err %T, want *Error", err)
				}
			case err != nil:
				t.Fatal(err)
			case !tc.check(c):
				t.Errorf("cost %+v", c)
			}
		})
	}
}

// TestShare: one rank's share scaled to 1/V, and per-stage lists refused.
func TestShare(t *testing.T) {
	c, err := New("F=1,B=2,W=1", nil, "").Share(2)
	if err != nil || !slices.Equal(c.F, []float64{0.5}) || !slices.Equal(c.B, []float64{1}) {
		t.Errorf("Share(2) = %+v, %v; want F 0.5, B 1", c, err)
	}
	if _, err := New("F=1:2", nil, "").Share(1); err == nil || !strings.Contains(err.Error(), "-cost: ") {
		t.Errorf("per-stage F in a share: %v", err)
	}
	// A program auto chose without a model is simulated by the share.
	p := New("F=1,B=2,W=1", nil, "")
	prog := ir.Program{Ranks: make([][]ir.Step, 2)}
	if c, err := p.Program(prog, nil, 2); err != nil || !slices.Equal(c.F, []float64{0.5}) {
		t.Errorf("Program(share 2) = %+v, %v", c, err)
	}
}

// TestOrder: the costs a cost-aware family is built for, nil for sizes
// the family's own check refuses.
func TestOrder(t *testing.T) {
	c, err := New("F=1,I=0.5,W=1.5,comm=0.1", nil, "").Order(2, 2)
	if err != nil || c == nil || c.F[0] != 1 || c.Comm != 0.1 || c.I[0] != 0.5 || c.W[0] != 1.5 {
		t.Errorf("Order(2, 2) = %+v, %v", c, err)
	}
	if c, err := New("F=1", nil, "").Order(0, 2); c != nil || err != nil {
		t.Errorf("Order(0, 2) = %+v, %v; want nil, nil", c, err)
	}
}

// TestSplitWithoutModel: a split of layers needs a model.
func TestSplitWithoutModel(t *testing.T) {
	if _, err := New("", nil, "").Split(model.Partition{Bounds: []int{0, 1}}, 1); err == nil {
		t.Error("Split without a model: no error")
	}
}
