package nn

import (
	"fmt"
	"testing"

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
// issue's Linear at batch 64, examples/mlp's layers (8 rows, width 32),
// charlm's (-dim 48, 4 heads, 64 tokens, 4 sequences: 256 rows; MLP width
// 192) three products of a Linear, and attention's per-head products
// (t=64, dh=12): q·kᵀ, P·v, Pᵀ·dO.
var gemmShapes = []gemmShape{
	{"linear/64x512x512/nn", false, false, 64, 512, 512},
	{"mlp/8x32x32/nn", false, false, 8, 32, 32},
	{"mlp/8x32x32/nt", false, true, 8, 32, 32},
	{"mlp/32x32x8/tn", true, false, 32, 32, 8},
	{"charlm/256x144x48/nn", false, false, 256, 144, 48},
	{"charlm/256x48x192/nn", false, false, 256, 48, 192},
	{"charlm/256x192x48/nt", false, true, 256, 192, 48},
	{"charlm/48x192x256/tn", true, false, 48, 192, 256},
	{"head/64x64x12/nt", false, true, 64, 64, 12},
	{"head/64x12x64/nn", false, false, 64, 12, 64},
	{"head/64x12x64/tn", true, false, 64, 12, 64},
}

// BenchmarkGEMM times gemm on the shapes of gemmShapes, one thread, beside
// OpenBLAS's cblas_sgemm/dgemm on the same operands where the benchmark is
// built with -tags openblas (libopenblas-dev), and reports GFLOP/s. Run it
// on one core, the two sides alternated by -count:
//
//	OPENBLAS_NUM_THREADS=1 go test -tags openblas -run '^$' -bench 'GEMM' -cpu 1 -count 6 ./runtime/nn/
func BenchmarkGEMM(b *testing.B) {
	openblas.SetThreads(1)
	for _, sh := range gemmShapes {
		for _, dt := range []string{"float32", "float64"} {
			for _, impl := range []string{"nn", "openblas"} {
				if impl == "openblas" && !openblas.Available {
					continue
				}
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
	b.ReportAllocs()
	for b.Loop() {
		if impl == "nn" {
			gemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 1, a, lda, bm, ldb, 0, c, sh.n)
			continue
		}
		switch a := any(a).(type) {
		case []float32:
			openblas.Sgemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 1, a, lda, any(bm).([]float32), ldb, 0, any(c).([]float32), sh.n)
		case []float64:
			openblas.Dgemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 1, a, lda, any(bm).([]float64), ldb, 0, any(c).([]float64), sh.n)
		}
	}
	b.ReportMetric(float64(b.N)*2*float64(sh.m*sh.n*sh.k)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
