package train_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/train/internal/testprog"
)

// The test model: 8 layers of width 6, each a Linear and a Tanh but the
// last (a Linear), trained on MSE against a fixed function of the input.
const (
	width  = 6
	layers = 8
	rows   = 3 // per micro-batch
	global = 8 // micro-batches per step, over every replica
)

// The programs of internal/testprog.
var (
	onef1b    = train.Program{Spec: testprog.OneF1BSpec, Ranks: testprog.OneF1BRanks[:]}
	eval      = train.Program{Spec: testprog.EvalSpec, Ranks: testprog.EvalRanks[:]}
	zbv2      = train.Program{Spec: testprog.ZBVSpec, Ranks: testprog.ZBVRanks[:]}
	halfProg  = train.Program{Spec: testprog.HalfSpec, Ranks: testprog.HalfRanks[:]}
	dual      = train.Program{Spec: testprog.DualSpec, Ranks: testprog.DualRanks[:]}
	clip      = train.Program{Spec: testprog.ClipSpec, Ranks: testprog.ClipRanks[:]}
	tie       = train.Program{Spec: testprog.TieSpec, Ranks: testprog.TieRanks[:]}
	recompute = train.Program{Spec: testprog.RecomputeSpec, Ranks: testprog.RecomputeRanks[:]}
	selective = train.Program{Spec: testprog.SelectiveSpec, Ranks: testprog.SelectiveRanks[:]}
	marked    = train.Program{Spec: testprog.MarkedSpec, Ranks: testprog.MarkedRanks[:]}
)

// layer builds layer i, seeded by i.
func layer(i int) (nn.Layer, error) {
	lin, err := nn.NewLinear(width, width, tensor.Float64, nn.NewRand(uint64(100+i)))
	if err != nil {
		return nil, err
	}
	if i == layers-1 {
		return nn.NewSequential(lin), nil
	}
	return nn.NewSequential(lin, nn.Tanh{}), nil
}

// batch returns global micro-batch g of step (0-based): a pure function of
// both.
func batch(step, g int) (x, y *tensor.Dense) {
	rng := nn.NewRand(uint64(1000*step + g + 1))
	xs, ys := make([]float64, rows*width), make([]float64, rows*width)
	for i := range xs {
		xs[i] = rng.Float64()*2 - 1
	}
	for i := range ys {
		ys[i] = math.Sin(xs[(i+1)%len(xs)])
	}
	return tensor.New(tensor.WithShape(rows, width), tensor.WithBacking(xs)),
		tensor.New(tensor.WithShape(rows, width), tensor.WithBacking(ys))
}

// data returns the micro-batches of a replica of a program of micro
// micro-batches: replica d takes global micro-batches [d·micro, (d+1)·micro).
func data(micro int) func(step, replica int) (pipe.DataSource, error) {
	return func(step, replica int) (pipe.DataSource, error) {
		var b pipe.MicroBatches
		for m := range micro {
			x, y := batch(step, replica*micro+m)
			b.Inputs, b.Targets = append(b.Inputs, x), append(b.Targets, y)
		}
		return b, nil
	}
}

// config is a job of steps steps of p over dp replicas.
func config(p train.Program, dp, steps int) train.Config {
	return train.Config{
		Train: p, DP: dp, Layer: layer,
		Loss: func(scale float64) pipe.Loss { return nn.MSE{Scale: scale} },
		Data: data(p.Spec.Micro), Steps: steps,
		LR:   nn.CosineDecay{Peak: 0.01, Min: 0.001, Warmup: 2, Total: 12},
		Clip: 0.5, TokensPerStep: global * rows,
	}
}

// run runs c and fails the test on an error.
func run(t *testing.T, c train.Config) *train.Result {
	t.Helper()
	res, err := train.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// losses returns the training losses of res's step records.
func losses(res *train.Result) []float64 {
	var out []float64
	for _, r := range res.Records {
		if r.Step > 0 {
			out = append(out, r.Loss)
		}
	}
	return out
}

// params reads every layer's parameters and optimizer state from the
// checkpoint in dir, and the tower's last when it holds one, in layer and
// name order, as one list of numbers.
func params(t *testing.T, dir string) []float64 {
	t.Helper()
	c, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := c.AllLayers()
	if c.Manifest.Layout.Tower {
		want = append(want, checkpoint.TowerLayer)
	}
	ps, err := c.Layers(want, 0)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(ps, func(a, b checkpoint.Param) int {
		if a.Layer != b.Layer {
			return a.Layer - b.Layer
		}
		return cmpString(a.Name, b.Name)
	})
	var out []float64
	for _, p := range ps {
		out = append(out, p.Value.F64...)
		for _, s := range p.State {
			out = append(out, s.Tensor.F64...)
		}
		out = append(out, p.Scalars["step"])
	}
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// maxDiff is the largest absolute difference of two equally long lists.
func maxDiff(t *testing.T, what string, a, b []float64) float64 {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d values against %d", what, len(a), len(b))
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

// same fails unless a and b are bit-identical.
func same(t *testing.T, what string, a, b []float64) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d values against %d", what, len(a), len(b))
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			t.Fatalf("%s: value %d is %v, want %v (bit for bit)", what, i, a[i], b[i])
		}
	}
}

func describe(p train.Program, dp int) string {
	return fmt.Sprintf("%s DP=%d", p.Spec.Describe(), dp)
}

// flipByte flips one byte in the middle of the file at path.
func flipByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
