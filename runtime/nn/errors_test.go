package nn

import (
	"fmt"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// TestErrors checks that bad shapes, dtypes and call orders give errors
// naming the problem, and never panics.
func TestErrors(t *testing.T) {
	rng := NewRand(9)
	m32 := func(r, c int) *tensor.Dense { return randMatrix(tensor.Float32, r, c, rng) }
	m64 := func(r, c int) *tensor.Dense { return randMatrix(tensor.Float64, r, c, rng) }
	lin := newLin(t, 3, 2, tensor.Float64, rng)
	other := newLin(t, 3, 2, tensor.Float64, rng)
	seq := NewSequential(newLin(t, 3, 4, tensor.Float64, rng), Tanh{}, newLin(t, 4, 2, tensor.Float64, rng))
	seq2 := NewSequential(newLin(t, 3, 2, tensor.Float64, rng))
	fwd := func(l Layer, x *tensor.Dense) any {
		_, s, err := l.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ints := tensor.New(tensor.WithShape(4, 3), tensor.Of(tensor.Int))
	vec := tensor.New(tensor.WithShape(3), tensor.Of(tensor.Float64))
	cube := tensor.New(tensor.WithShape(2, 2, 3), tensor.Of(tensor.Float64))
	badParam := &Param{Name: "w", Value: m64(2, 3), Grad: m64(3, 2)}

	cases := []struct {
		name string
		run  func() error
		want []string
	}{
		{"linear input width", func() error { _, _, err := lin.Forward(m64(4, 5)); return err },
			[]string{"Linear.Forward", "(4, 5)", "(batch, 3)", "(3, 2)"}},
		{"linear input dtype", func() error { _, _, err := lin.Forward(m32(4, 3)); return err },
			[]string{"float32", "(4, 3)", "float64"}},
		{"linear input int", func() error { _, _, err := lin.Forward(ints); return err },
			[]string{"(4, 3)", "int", "want float32 or float64"}},
		{"linear input 1-D", func() error { _, _, err := lin.Forward(vec); return err },
			[]string{"shape (3)", "2-D"}},
		{"linear input 3-D", func() error { _, _, err := lin.Forward(cube); return err },
			[]string{"(2, 2, 3)", "2-D"}},
		{"linear input nil", func() error { _, _, err := lin.Forward(nil); return err },
			[]string{"input is nil"}},
		{"linear dy shape", func() error { _, err := lin.BackwardInput(fwd(lin, m64(4, 3)), m64(5, 2)); return err },
			[]string{"Linear.BackwardInput", "(5, 2)", "(4, 2)"}},
		{"linear dy dtype", func() error { return lin.BackwardWeight(fwd(lin, m64(4, 3)), m32(4, 2)) },
			[]string{"Linear.BackwardWeight", "float32 (4, 2)", "want float64 (4, 2)"}},
		{"linear saved type", func() error { _, err := lin.BackwardInput("nope", m64(4, 2)); return err },
			[]string{"saved context is string"}},
		{"linear saved owner", func() error { _, err := lin.BackwardInput(fwd(other, m64(4, 3)), m64(4, 2)); return err },
			[]string{"another Linear"}},
		{"linear weight twice", func() error {
			s := fwd(lin, m64(4, 3))
			if err := lin.BackwardWeight(s, m64(4, 2)); err != nil {
				return fmt.Errorf("first call: %w", err)
			}
			return lin.BackwardWeight(s, m64(4, 2))
		}, []string{"already called"}},
		{"linear replaced weight", func() error {
			l := newLin(t, 3, 2, tensor.Float64, rng)
			l.Weight.Value, l.Weight.Grad = m64(2, 3), m64(2, 3)
			_, _, err := l.Forward(m64(4, 3))
			return err
		}, []string{`"weight"`, "(2, 3)", "want float64 (3, 2)"}},
		{"new linear sizes", func() error { _, err := NewLinear(0, 2, tensor.Float64, rng); return err },
			[]string{"in=0"}},
		{"new linear dtype", func() error { _, err := NewLinear(2, 2, tensor.Int, rng); return err },
			[]string{"dtype int"}},
		{"new linear rng", func() error { _, err := NewLinear(2, 2, tensor.Float64, nil); return err },
			[]string{"nil *rand.Rand"}},
		{"zero-value linear", func() error { _, _, err := (&Linear{}).Forward(m64(2, 2)); return err },
			[]string{"NewLinear"}},
		{"tanh dy shape", func() error { _, err := Tanh{}.BackwardInput(fwd(Tanh{}, m64(4, 3)), m64(4, 4)); return err },
			[]string{"Tanh.BackwardInput", "(4, 4)", "(4, 3)"}},
		{"relu saved from tanh", func() error { _, err := ReLU{}.BackwardInput(fwd(Tanh{}, m64(4, 3)), m64(4, 3)); return err },
			[]string{"ReLU.BackwardInput", "Tanh.Forward"}},
		{"gelu dy dtype", func() error { _, err := GELU{}.BackwardInput(fwd(GELU{}, m64(4, 3)), m32(4, 3)); return err },
			[]string{"float32 (4, 3)", "float64 (4, 3)"}},
		{"sequential inner shape", func() error { _, _, err := seq.Forward(m64(4, 5)); return err },
			[]string{"layer 0 (*nn.Linear)", "(4, 5)"}},
		{"sequential weight before input", func() error { return seq.BackwardWeight(fwd(seq, m64(4, 3)), m64(4, 2)) },
			[]string{"BackwardInput has not run"}},
		{"sequential weight twice", func() error {
			s := fwd(seq, m64(4, 3))
			if _, err := seq.Backward(s, m64(4, 2)); err != nil {
				return fmt.Errorf("first call: %w", err)
			}
			return seq.BackwardWeight(s, m64(4, 2))
		}, []string{"BackwardWeight already ran"}},
		{"sequential input twice", func() error {
			s := fwd(seq, m64(4, 3))
			if _, err := seq.BackwardInput(s, m64(4, 2)); err != nil {
				return fmt.Errorf("first call: %w", err)
			}
			_, err := seq.BackwardInput(s, m64(4, 2))
			return err
		}, []string{"already called"}},
		{"sequential dy shape", func() error { _, err := seq.BackwardInput(fwd(seq, m64(4, 3)), m64(4, 3)); return err },
			[]string{"(4, 3)", "want float64 (4, 2)"}},
		{"sequential weight dy shape", func() error {
			s := fwd(seq, m64(4, 3))
			if _, err := seq.BackwardInput(s, m64(4, 2)); err != nil {
				return fmt.Errorf("first call: %w", err)
			}
			return seq.BackwardWeight(s, m64(3, 2))
		}, []string{"(3, 2)", "want float64 (4, 2)"}},
		{"sequential saved owner", func() error { _, err := seq.BackwardInput(fwd(seq2, m64(4, 3)), m64(4, 2)); return err },
			[]string{"another Sequential"}},
		{"sequential nil layer", func() error { _, _, err := NewSequential(Tanh{}, nil).Forward(m64(2, 2)); return err },
			[]string{"layer 1 is nil"}},
		{"mse shape", func() error { _, _, err := MSE{}.Loss(m64(4, 3), m64(4, 2)); return err },
			[]string{"target shape (4, 2)", "output shape (4, 3)"}},
		{"mse scale", func() error { _, _, err := MSE{Scale: 1 / zero}.Loss(m64(4, 3), m64(4, 3)); return err },
			[]string{"Scale +Inf"}},
		{"ce shape", func() error { _, _, err := SoftmaxCrossEntropy{}.Loss(m64(4, 3), m64(4, 2)); return err },
			[]string{"target shape (4, 2)", "(4, 3)", "(4) or (4, 1)"}},
		{"ce index range", func() error {
			_, _, err := SoftmaxCrossEntropy{}.Loss(m64(2, 3), fromF64(tensor.Float64, []int{2}, []float64{1, 3}))
			return err
		}, []string{"row 1", "index 3", "[0, 3)"}},
		{"ce index fraction", func() error {
			_, _, err := SoftmaxCrossEntropy{}.Loss(m64(2, 3), fromF64(tensor.Float64, []int{2, 1}, []float64{0.5, 1}))
			return err
		}, []string{"row 0", "index 0.5"}},
		{"ce target nil", func() error { _, _, err := SoftmaxCrossEntropy{}.Loss(m64(2, 3), nil); return err },
			[]string{"target is nil"}},
		{"sgd grad shape", func() error { return (&SGD{LR: 0.1}).Step([]*Param{badParam}) },
			[]string{`"w"`, "(2, 3)", "(3, 2)"}},
		{"adam nil grad", func() error { return NewAdam(0.1).Step([]*Param{{Name: "b", Value: m64(1, 2)}}) },
			[]string{`"b"`, "nil Value or Grad"}},
		{"adam eps", func() error { return (&Adam{LR: 0.1, Beta1: 0.9, Beta2: 0.999}).Step(lin.Params()) },
			[]string{"Eps 0"}},
		{"adam duplicate", func() error { return NewAdam(0.1).Step(append(lin.Params(), lin.Weight)) },
			[]string{"appears twice"}},
		{"optimizer state shape", func() error {
			p := &Param{Name: "p", Value: m64(2, 2), Grad: m64(2, 2)}
			o := &SGD{LR: 0.1, Momentum: 0.9}
			if err := o.Step([]*Param{p}); err != nil {
				return fmt.Errorf("first call: %w", err)
			}
			p.Value, p.Grad = m64(3, 2), m64(3, 2)
			return o.Step([]*Param{p})
		}, []string{`"p"`, "(3, 2)", "(2, 2)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panicked: %v", r)
					}
				}()
				err = c.run()
			}()
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			t.Log(msg)
			if strings.HasPrefix(msg, "first call") {
				t.Fatal(msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
		})
	}
}

var zero float64

// TestOptimizerStepIsAtomic checks that a failing Step changes nothing.
func TestOptimizerStepIsAtomic(t *testing.T) {
	rng := NewRand(4)
	l := newLin(t, 3, 2, tensor.Float64, rng)
	before := f64(l.Weight.Value)
	bad := &Param{Name: "bad", Value: randMatrix(tensor.Float64, 2, 2, rng), Grad: randMatrix(tensor.Float64, 2, 3, rng)}
	for _, o := range []Optimizer{&SGD{LR: 1, Momentum: 0.5}, NewAdam(1)} {
		if err := o.Step(append(l.Params(), bad)); err == nil {
			t.Fatalf("%T: no error", o)
		}
		if got := f64(l.Weight.Value); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Fatalf("%T changed parameters on error", o)
		}
	}
}
