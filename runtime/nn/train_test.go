package nn

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"gorgonia.org/tensor"
)

// problem is a seeded synthetic data set.
type problem struct {
	name     string
	in, out  int
	x, y     *tensor.Dense
	loss     Loss
	accuracy bool
}

func regression(dt tensor.Dtype) problem {
	rng := NewRand(100)
	const n = 64
	x := randMatrix(tensor.Float64, n, 3, rng)
	y := make([]float64, n*2)
	for r := range n {
		a, b, c := x.Data().([]float64)[3*r], x.Data().([]float64)[3*r+1], x.Data().([]float64)[3*r+2]
		y[2*r] = math.Sin(2*a) + 0.5*b*c
		y[2*r+1] = a - b + 0.3*c*c
	}
	return problem{name: "regression", in: 3, out: 2, x: fromF64(dt, []int{n, 3}, f64(x)), y: fromF64(dt, []int{n, 2}, y), loss: MSE{}}
}

func classification(dt tensor.Dtype) problem {
	rng := NewRand(200)
	const n, k = 90, 3
	centers := [k][2]float64{{1, 0}, {-0.5, 0.9}, {-0.5, -0.9}}
	x := make([]float64, n*2)
	y := make([]float64, n)
	for r := range n {
		c := r % k
		y[r] = float64(c)
		x[2*r] = centers[c][0] + 0.4*rng.NormFloat64()
		x[2*r+1] = centers[c][1] + 0.4*rng.NormFloat64()
	}
	return problem{name: "classification", in: 2, out: k, x: fromF64(dt, []int{n, 2}, x), y: fromF64(dt, []int{n}, y), loss: SoftmaxCrossEntropy{}, accuracy: true}
}

func accuracy(y, labels *tensor.Dense) float64 {
	yv, lv := f64(y), f64(labels)
	k := len(yv) / len(lv)
	var ok int
	for r, l := range lv {
		row := yv[r*k : (r+1)*k]
		if slices.Index(row, slices.Max(row)) == int(l) {
			ok++
		}
	}
	return float64(ok) / float64(len(lv))
}

// train runs steps of full-batch training of a Linear-Tanh-Linear model and
// returns the loss before each step and the final accuracy.
func train(t *testing.T, p problem, dt tensor.Dtype, opt Optimizer, steps int) ([]float64, float64) {
	rng := NewRand(42)
	m := NewSequential(newLin(t, p.in, 16, dt, rng), Tanh{}, newLin(t, 16, p.out, dt, rng))
	var losses []float64
	var y *tensor.Dense
	for range steps + 1 {
		m.ZeroGrad()
		var saved any
		var err error
		y, saved, err = m.Forward(p.x)
		if err != nil {
			t.Fatal(err)
		}
		l, dy, err := p.loss.Loss(y, p.y)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
		if len(losses) > steps {
			break
		}
		if _, err := m.BackwardInput(saved, dy); err != nil {
			t.Fatal(err)
		}
		if err := m.BackwardWeight(saved, dy); err != nil {
			t.Fatal(err)
		}
		if err := opt.Step(m.Params()); err != nil {
			t.Fatal(err)
		}
	}
	return losses, accuracy(y, p.y)
}

func TestTrainingDecreasesLoss(t *testing.T) {
	const steps = 60
	opts := []struct {
		name string
		new  func() Optimizer
	}{
		{"sgd", func() Optimizer { return &SGD{LR: 0.1} }},
		{"sgd-momentum", func() Optimizer { return &SGD{LR: 0.05, Momentum: 0.9} }},
		{"adam", func() Optimizer { return NewAdam(0.02) }},
	}
	for _, dt := range dtypes {
		for _, mk := range []func(tensor.Dtype) problem{regression, classification} {
			p := mk(dt)
			for _, o := range opts {
				t.Run(fmt.Sprintf("%v/%s/%s", dt, p.name, o.name), func(t *testing.T) {
					losses, acc := train(t, p, dt, o.new(), steps)
					first, last := losses[0], losses[len(losses)-1]
					if p.accuracy {
						t.Logf("loss %.4f -> %.4f, accuracy %.2f", first, last, acc)
					} else {
						t.Logf("loss %.4f -> %.4f", first, last)
					}
					if !(last < 0.5*first) {
						t.Errorf("loss went from %v to %v; want it at least halved", first, last)
					}
					if p.accuracy && acc < 0.9 {
						t.Errorf("accuracy %.2f, want >= 0.9", acc)
					}
					again, _ := train(t, p, dt, o.new(), steps)
					if !slices.Equal(losses, again) {
						t.Errorf("training is not deterministic")
					}
				})
			}
		}
	}
}
