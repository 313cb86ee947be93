package nn

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
	blasgonum "gonum.org/v1/gonum/blas/gonum"

	"github.com/ppgen/ppgen/runtime/nn/internal/openblas"
)

// gemmShape is one product gemm runs in the examples: c [m,n] = op(a)·op(b)
// with op(a) [m,k], op(b) [k,n], transposed where ta or tb.
type gemmShape struct {
	name    string
	ta, tb  bool
	m, n, k int
}

// gemmShapes are the products the examples and issue 36 measure: the
// issue's Linear at batch 64, examples/mlp's layers (8 rows, width 32:
// forward nn, input gradient nt, weight gradient tn), charlm's (-dim 48, 4
// heads, 64 tokens, 4 sequences: 256 rows; MLP width 192) Linear products,
// BenchmarkAttention's q/k/v projection (d=512, 256 rows: forward x·w,
// input gradient dy·wᵀ, weight gradient xᵀ·dy), and attention's per-head products (t=64, dh=12): q·kᵀ,
// P·v, Pᵀ·dO.
var gemmShapes = []gemmShape{
	{"linear/64x512x512/nn", false, false, 64, 512, 512},
	{"mlp/8x32x32/nn", false, false, 8, 32, 32},
	{"mlp/8x32x32/nt", false, true, 8, 32, 32},
	{"mlp/32x32x8/tn", true, false, 32, 32, 8},
	{"charlm/256x144x48/nn", false, false, 256, 144, 48},
	{"charlm/256x48x192/nn", false, false, 256, 48, 192},
	{"charlm/256x192x48/nt", false, true, 256, 192, 48},
	{"charlm/48x192x256/tn", true, false, 48, 192, 256},
	{"attention/256x1536x512/nn", false, false, 256, 1536, 512},
	{"attention/256x512x1536/nt", false, true, 256, 512, 1536},
	{"attention/512x1536x256/tn", true, false, 512, 1536, 256},
	{"head/64x64x12/nt", false, true, 64, 64, 12},
	{"head/64x12x64/nn", false, false, 64, 12, 64},
	{"head/64x12x64/tn", true, false, 64, 12, 64},
}

// BenchmarkGEMM times gemm ("nn") on the shapes of gemmShapes beside
// gonum's GEMM and, where the benchmark is built with -tags openblas
// (libopenblas-dev installed), OpenBLAS's cblas_sgemm/dgemm on one thread,
// on the same operands (c = op(a)·op(b)), and reports GFLOP/s, the rate
// of the fastest call (best-GFLOP/s) and that over the core's FMA peak
// (BenchmarkGEMM/peak, timed once per process: the best of 20). Run it on
// one core, the sides alternated by -count, and read the ratio of the nn
// and openblas rows of each shape:
//
//	go test -tags openblas -run '^$' -bench GEMM -cpu 1 -count 6 ./runtime/nn/
func BenchmarkGEMM(b *testing.B) {
	openblas.SetThreads(1)
	if hasFMA {
		b.Run("peak", func(b *testing.B) {
			for b.Loop() {
				fmaLoop(1 << 16)
			}
			b.ReportMetric(float64(b.N)*(1<<16)*2*8*12/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			b.ReportMetric(fmaPeak(), "best-GFLOP/s")
		})
	}
	impls := []string{"nn", "gonum"}
	if useSmall {
		impls = append(impls, "tiles")
	}
	if openblas.Available {
		impls = append(impls, "openblas")
	}
	for _, sh := range gemmShapes {
		for _, dt := range []string{"float32", "float64"} {
			for _, impl := range impls {
				b.Run(fmt.Sprintf("%s/%s/%s", sh.name, dt, impl), func(b *testing.B) {
					if dt == "float32" {
						benchShape[float32](b, sh, impl)
					} else {
						benchShape[float64](b, sh, impl)
					}
				})
			}
		}
	}
}

// BenchmarkGEMMSmall times the AVX-512 small-matrix path ("nn", where
// smallGemm takes the shape) against the tiles ("tiles": useSmall off) on
// a grid of shapes around smallMax, each op, to choose smallMax (where
// useSmall is on: an AVX-512 CPU, unless built with -tags nogemmavx512):
//
//	go test -run '^$' -bench GEMMSmall -cpu 1 -count 6 ./runtime/nn/
func BenchmarkGEMMSmall(b *testing.B) {
	if !useSmall {
		b.Skip("small-matrix kernels off")
	}
	for _, m := range []int{8, 13, 64, 144} {
		for _, n := range []int{12, 32, 64, 128} {
			for _, k := range []int{12, 64, 256, 1024} {
				for _, op := range []string{"nn", "nt", "tn"} {
					sh := gemmShape{fmt.Sprintf("%dx%dx%d/%s", m, n, k, op), op == "tn", op == "nt", m, n, k}
					for _, dt := range []string{"float32", "float64"} {
						for _, impl := range []string{"nn", "tiles"} {
							b.Run(fmt.Sprintf("%s/%s/%s", sh.name, dt, impl), func(b *testing.B) {
								if dt == "float32" {
									benchShape[float32](b, sh, impl)
								} else {
									benchShape[float64](b, sh, impl)
								}
							})
						}
					}
				}
			}
		}
	}
}

// fmaPeak is the core's float32 FMA peak in GFLOP/s, the best of a few
// timings of fmaLoop (float64's is half); 0 off amd64.
var fmaPeak = sync.OnceValue(func() float64 {
	if !hasFMA {
		return 0
	}
	const steps = 1 << 20
	best := time.Duration(1 << 62)
	for range 20 {
		start := time.Now()
		fmaLoop(steps)
		best = min(best, time.Since(start))
	}
	return steps * 2 * 8 * 12 / best.Seconds() / 1e9
})

func benchShape[T float](b *testing.B, sh gemmShape, impl string) {
	lda, ldb := sh.k, sh.n
	if sh.ta {
		lda = sh.m
	}
	if sh.tb {
		ldb = sh.k
	}
	a, bm, c := make([]T, sh.m*sh.k), make([]T, sh.k*sh.n), make([]T, sh.m*sh.n)
	for i := range a {
		a[i] = T(i%7) * 0.1
	}
	for i := range bm {
		bm[i] = T(i%5) * 0.1
	}
	peak := fmaPeak()
	transA, transB := blas.NoTrans, blas.NoTrans
	if sh.ta {
		transA = blas.Trans
	}
	if sh.tb {
		transB = blas.Trans
	}
	run := func() {
		switch a := any(a).(type) {
		case []float32:
			bm, c := any(bm).([]float32), any(c).([]float32)
			switch impl {
			case "nn":
				gemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 1, a, lda, bm, ldb, 0, c, sh.n)
			case "tiles":
				useSmall = false
				gemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 1, a, lda, bm, ldb, 0, c, sh.n)
				useSmall = true
			case "gonum":
				blasgonum.Implementation{}.Sgemm(transA, transB, sh.m, sh.n, sh.k, 1, a, lda, bm, ldb, 0, c, sh.n)
			default:
				openblas.Sgemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 1, a, lda, bm, ldb, 0, c, sh.n)
			}
		case []float64:
			bm, c := any(bm).([]float64), any(c).([]float64)
			switch impl {
			case "nn":
				gemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 1, a, lda, bm, ldb, 0, c, sh.n)
			case "tiles":
				useSmall = false
				gemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 1, a, lda, bm, ldb, 0, c, sh.n)
				useSmall = true
			case "gonum":
				blasgonum.Implementation{}.Dgemm(transA, transB, sh.m, sh.n, sh.k, 1, a, lda, bm, ldb, 0, c, sh.n)
			default:
				openblas.Dgemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 1, a, lda, bm, ldb, 0, c, sh.n)
			}
		}
	}
	run() // the packing buffers, allocated once per process
	b.ReportAllocs()
	fastest := time.Duration(1 << 62)
	for b.Loop() {
		start := time.Now()
		run()
		fastest = min(fastest, time.Since(start))
	}
	flops := 2 * float64(sh.m*sh.n*sh.k)
	gflops := float64(b.N) * flops / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(gflops, "GFLOP/s")
	// On a shared machine the fastest call is the one least disturbed:
	// compare its rate across the rows of one run.
	best := flops / fastest.Seconds() / 1e9
	b.ReportMetric(best, "best-GFLOP/s")
	if peak > 0 {
		if _, ok := any(a).([]float64); ok {
			peak /= 2
		}
		b.ReportMetric(best/peak, "best-of-peak")
	}
}
