package nn

import (
	"fmt"
	"math"
	"testing"
)

// TestSmallGemm checks the AVX-512 small-matrix path against the triple
// loop at every row edge (m = 1..17: the 16×1, 8×1, 8×2, 4×2 and 1×2
// kernels and their mixes), every column edge of two vectors (n = 1..2·lanes+1, for both
// dtypes), k from 1 to past a vector, every transpose case, alpha/beta
// (beta = 0 overwriting a NaN) and leading dimensions 3 wider than the
// operands; C's padding must be untouched (the masked stores) and the call
// must have taken the small path. It runs where useSmall is on.
func TestSmallGemm(t *testing.T) {
	if !useSmall {
		t.Skip("small-matrix kernels off (they run on an AVX-512 CPU, unless built with -tags nogemmavx512)")
	}
	scalars := [][2]float64{{1, 0}, {1, 1}, {0.5, -2}}
	for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
		for _, k := range []int{1, 3, 17} {
			for m := 1; m <= 17; m++ {
				for _, ab := range scalars {
					name := fmt.Sprintf("%v%v/k%d/m%d/a%v,b%v", tr[0], tr[1], k, m, ab[0], ab[1])
					t.Run("f64/"+name, func(t *testing.T) {
						for n := 1; n <= 2*8+1; n++ {
							checkSmall[float64](t, tr[0], tr[1], m, n, k, ab, 1e-12)
						}
					})
					t.Run("f32/"+name, func(t *testing.T) {
						for n := 1; n <= 2*16+1; n++ {
							checkSmall[float32](t, tr[0], tr[1], m, n, k, ab, 2e-5)
						}
					})
				}
			}
		}
	}
	// The benchmarks' shapes, and the largest product the path takes.
	for _, sz := range [][3]int{{64, 12, 64}, {8, 32, 32}, {32, 32, 8}, {64, 64, 12}, {64, 64, 64}} {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			t.Run(fmt.Sprintf("%v/%v%v", sz, tr[0], tr[1]), func(t *testing.T) {
				checkSmall[float64](t, tr[0], tr[1], sz[0], sz[1], sz[2], [2]float64{0.5, -2}, 1e-12)
				checkSmall[float32](t, tr[0], tr[1], sz[0], sz[1], sz[2], [2]float64{0.5, -2}, 2e-5)
			})
		}
	}
}

// checkSmall is checkGemm (the naive loop, every padding element of c,
// beta = 0 over a NaN) through smallGemm, which must take the product.
func checkSmall[T float](t *testing.T, ta, tb bool, m, n, k int, ab [2]float64, tol float64) {
	t.Helper()
	small := func(ta, tb bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
		if !smallGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) {
			t.Fatalf("%dx%dx%d: smallGemm declined", m, n, k)
		}
	}
	checkGemm(t, small, ta, tb, [3]int{m, n, k}, ab, tol)
}

// TestSmallGemmDeterministic checks that the small path gives the same bits
// on every call (nothing depends on threads or buffers' past contents).
func TestSmallGemmDeterministic(t *testing.T) {
	if !useSmall {
		t.Skip("small-matrix kernels off")
	}
	m, n, k := 33, 20, 40
	rng := NewRand(7)
	a, b := make([]float32, m*k), make([]float32, n*k)
	for i := range a {
		a[i] = float32(rng.Float64())
	}
	for i := range b {
		b[i] = float32(rng.Float64())
	}
	first := make([]float32, m*n)
	smallGemm(false, true, m, n, k, 1, a, k, b, k, 0, first, n)
	for range 3 {
		c := make([]float32, m*n)
		smallGemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
		for i := range c {
			if math.Float32bits(c[i]) != math.Float32bits(first[i]) {
				t.Fatalf("c[%d] = %v, first call %v", i, c[i], first[i])
			}
		}
	}
}
