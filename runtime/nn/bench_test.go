package nn

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"gorgonia.org/tensor"
)

// TestParallelDeterministic checks that large products give bit-identical
// results with one thread and with many.
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
	for _, dt := range dtypes {
		a, b := run(1, dt), run(8, dt)
		for i := range a {
			if !slices.Equal(a[i], b[i]) {
				t.Errorf("%v: result %d differs between 1 and 8 threads", dt, i)
			}
		}
	}
}

func BenchmarkLinear(b *testing.B) {
	for _, dt := range dtypes {
		for _, n := range []int{256, 1024} {
			b.Run(fmt.Sprintf("%v/%dx%dx%d", dt, n, n, n), func(b *testing.B) {
				rng := NewRand(1)
				l, err := NewLinear(n, n, dt, rng)
				if err != nil {
					b.Fatal(err)
				}
				x, dy := randMatrix(dt, n, n, rng), randMatrix(dt, n, n, rng)
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
				b.ReportMetric(float64(b.N)*6*float64(n*n*n)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
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
