package nn

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"gorgonia.org/tensor"
)

// TestParallelDeterministic checks that large products and attention give
// bit-identical results with one thread and with many.
func TestParallelDeterministic(t *testing.T) {
	if testing.Short() {
		t.Skip("large products")
	}
	run := func(procs int, dt tensor.Dtype) [][]float64 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		rng := NewRand(1)
		m := NewSequential(newLin(t, 256, 384, dt, rng), GELU{}, newLin(t, 384, 128, dt, rng))
		x, r := randMatrix(dt, 96, 256, rng), randMatrix(dt, 96, 128, rng)
		dx := runBackward(t, m, x, r, "split")
		out := [][]float64{f64(dx)}
		for _, p := range m.Params() {
			out = append(out, f64(p.Grad))
		}
		return out
	}
	// Self-attention runs its (sequence, head) pairs on several goroutines
	// (eachHead): the same bits with one thread and with many.
	attn := func(procs int, dt tensor.Dtype) [][]float64 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		rng := NewRand(2)
		a, err := NewSelfAttention(64, 4, 16, dt, rng)
		if err != nil {
			t.Fatal(err)
		}
		x, r := randMatrix(dt, 48, 64, rng), randMatrix(dt, 48, 64, rng)
		dx := runBackward(t, a, x, r, "split")
		out := [][]float64{f64(dx)}
		for _, p := range a.Params() {
			out = append(out, f64(p.Grad))
		}
		return out
	}
	for _, dt := range dtypes {
		for name, f := range map[string]func(int, tensor.Dtype) [][]float64{"mlp": run, "attention": attn} {
			a, b := f(1, dt), f(8, dt)
			for i := range a {
				if !slices.Equal(a[i], b[i]) {
					t.Errorf("%s %v: result %d differs between 1 and 8 threads", name, dt, i)
				}
			}
		}
	}
}

// BenchmarkLinear times a Linear's forward and backward (input and weight
// gradients) at batch×in×out, the first the shape of BenchmarkGEMM, and
// reports GFLOP/s counting the three products (6·batch·in·out):
//
//	go test -run '^$' -bench 'GEMM|Linear|Attention' -count 6 ./runtime/nn/
func BenchmarkLinear(b *testing.B) {
	for _, dt := range dtypes {
		for _, sz := range [][3]int{{64, 512, 512}, {256, 256, 256}} {
			rows, in, out := sz[0], sz[1], sz[2]
			b.Run(fmt.Sprintf("%v/%dx%dx%d", dt, rows, in, out), func(b *testing.B) {
				rng := NewRand(1)
				l, err := NewLinear(in, out, dt, rng)
				if err != nil {
					b.Fatal(err)
				}
				x, dy := randMatrix(dt, rows, in, rng), randMatrix(dt, rows, out, rng)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					_, s, err := l.Forward(x)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := l.Backward(s, dy); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)*6*float64(rows*in*out)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

func benchKernel[T float](b *testing.B, which string) {
	const n = 512
	x, w, y := make([]T, n*n), make([]T, n*n), make([]T, n*n)
	bias := make([]T, n)
	for i := range x {
		x[i], w[i] = T(i%7)*0.1, T(i%5)*0.1
	}
	for b.Loop() {
		switch which {
		case "forward":
			linearForward(x, w, bias, y, n, n, n)
		case "input":
			linearBackwardInput(x, w, y, n, n, n)
		case "weight":
			linearBackwardWeight(x, w, y, bias, n, n, n)
		}
	}
	b.ReportMetric(float64(b.N)*2*n*n*n/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkKernels times the three products of a 512³ Linear separately.
func BenchmarkKernels(b *testing.B) {
	for _, k := range []string{"forward", "input", "weight"} {
		b.Run("float32/"+k, func(b *testing.B) { benchKernel[float32](b, k) })
		b.Run("float64/"+k, func(b *testing.B) { benchKernel[float64](b, k) })
	}
}

// BenchmarkAttention times causal self-attention (NewSelfAttention: the
// q/k/v and output projections and the core) forward and backward, d=512,
// 8 heads, 4 sequences of 64 tokens, and reports GFLOP/s counting the
// products only (forward 8·rows·d² + 4·rows·T·d, backward twice that), to
// read against BenchmarkGEMM's gonum rows:
//
//	go test -run '^$' -bench 'GEMM|Attention' -count 6 ./runtime/nn/
func BenchmarkAttention(b *testing.B) {
	const d, heads, T, rows = 512, 8, 64, 256
	for _, dt := range dtypes {
		b.Run(dt.String(), func(b *testing.B) {
			rng := NewRand(1)
			a, err := NewSelfAttention(d, heads, T, dt, rng)
			if err != nil {
				b.Fatal(err)
			}
			x, dy := randMatrix(dt, rows, d, rng), randMatrix(dt, rows, d, rng)
			for b.Loop() {
				_, s, err := a.Forward(x)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := a.Backward(s, dy); err != nil {
					b.Fatal(err)
				}
			}
			flops := 3 * (8*rows*d*d + 4*rows*T*d)
			b.ReportMetric(float64(b.N)*float64(flops)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkTransformerStep times one training step of a pipeline stage
// shaped like examples/charlm's default (two pre-norm transformer blocks,
// d=48, 4 heads, MLP width 192, micro-batches of 4 sequences of 64 tokens,
// float64), as a zero-bubble schedule runs it: the forwards of 8
// micro-batches, all in flight, then each one's input gradient, then each
// one's weight gradient. B/op is what a step allocates:
//
//	go test -run '^$' -bench TransformerStep -benchmem -count 6 ./runtime/nn/
func BenchmarkTransformerStep(b *testing.B) {
	const d, heads, T, hidden, rows, micro = 48, 4, 64, 192, 256, 8
	rng := NewRand(1)
	var blocks []Layer
	for range 2 {
		blk, err := NewTransformerBlock(d, heads, T, hidden, tensor.Float64, rng)
		if err != nil {
			b.Fatal(err)
		}
		blocks = append(blocks, blk)
	}
	m := NewSequential(blocks...)
	xs, dys := make([]*tensor.Dense, micro), make([]*tensor.Dense, micro)
	for i := range micro {
		xs[i], dys[i] = randMatrix(tensor.Float64, rows, d, rng), randMatrix(tensor.Float64, rows, d, rng)
	}
	saved := make([]any, micro)
	for b.Loop() {
		for i := range micro {
			var err error
			if _, saved[i], err = m.Forward(xs[i]); err != nil {
				b.Fatal(err)
			}
		}
		for i := range micro {
			if _, err := m.BackwardInput(saved[i], dys[i]); err != nil {
				b.Fatal(err)
			}
		}
		for i := range micro {
			if err := m.BackwardWeight(saved[i], dys[i]); err != nil {
				b.Fatal(err)
			}
		}
		m.ZeroGrad()
	}
}
