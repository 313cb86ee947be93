package nn

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// naiveGemm is the textbook triple loop in float64, the reference for gemm.
func naiveGemm[T float](ta, tb bool, m, n, k int, alpha float64, a []T, lda int, b []T, ldb int, beta float64, c []T, ldc int) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for l := range k {
				var av, bv T
				if ta {
					av = a[l*lda+i]
				} else {
					av = a[i*lda+l]
				}
				if tb {
					bv = b[j*ldb+l]
				} else {
					bv = b[l*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			cv := 0.0
			if beta != 0 {
				cv = beta * float64(c[i*ldc+j])
			}
			out[i*n+j] = cv + alpha*s
		}
	}
	return out
}

// TestGemmAgainstNaive checks both of gemm's kernels (the blocked one,
// where the CPU has AVX2 and FMA, and gonum's) against the triple loop for every
// transpose case, sizes around the micro-panel and tile edges, padded
// leading dimensions and alpha/beta special cases, and that beta = 0
// overwrites a NaN in c, as BLAS does.
func TestGemmAgainstNaive(t *testing.T) {
	sizes := [][3]int{{1, 1, 1}, {5, 7, 3}, {6, 8, 1}, {7, 17, 9}, {73, 129, 257}, {64, 64, 64}, {130, 300, 40}, {3, 5, 0},
		{6, 16, 4}, {2, 8, 5}, {8, 32, 32}, {64, 12, 64}, {13, 20, 515}, {289, 257, 9}, {256, 24, 300}}
	scalars := [][2]float64{{1, 0}, {1, 1}, {0.5, -2}, {-1, 0.25}}
	for _, sz := range sizes {
		for _, ab := range scalars {
			for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
				name := fmt.Sprintf("%dx%dx%d/a%v,b%v/%v%v", sz[0], sz[1], sz[2], ab[0], ab[1], tr[0], tr[1])
				for kn, kernel := range map[string]func(ta, tb bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int){
					"gonum": gonumGemm[float64], "blocked": blockedIfFMA[float64]} {
					t.Run(kn+"/f64/"+name, func(t *testing.T) { checkGemm(t, kernel, tr[0], tr[1], sz, ab, 1e-12) })
				}
				for kn, kernel := range map[string]func(ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int){
					"gonum": gonumGemm[float32], "blocked": blockedIfFMA[float32]} {
					t.Run(kn+"/f32/"+name, func(t *testing.T) { checkGemm(t, kernel, tr[0], tr[1], sz, ab, 2e-5) })
				}
			}
		}
	}
}

// blockedIfFMA is blockedGemm where the micro-kernel runs (m, n > 0, as
// gemm calls it), gemm elsewhere.
func blockedIfFMA[T float](ta, tb bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if !hasFMA {
		gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	blockedGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func checkGemm[T float](t *testing.T, kernel func(ta, tb bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int), ta, tb bool, sz [3]int, ab [2]float64, tol float64) {
	m, n, k := sz[0], sz[1], sz[2]
	rng := NewRand(uint64(m*1000003 + n*1009 + k))
	// Leading dimensions 3 wider than the operands, to catch a kernel that
	// assumes contiguous rows.
	ar, ac := m, k
	if ta {
		ar, ac = k, m
	}
	br, bc := k, n
	if tb {
		br, bc = n, k
	}
	lda, ldb, ldc := ac+3, bc+3, n+3
	a, b, c := make([]T, max(ar*lda, 1)), make([]T, max(br*ldb, 1)), make([]T, m*ldc)
	for i := range a {
		a[i] = T(2*rng.Float64() - 1)
	}
	for i := range b {
		b[i] = T(2*rng.Float64() - 1)
	}
	for i := range c {
		c[i] = T(2*rng.Float64() - 1)
	}
	if ab[1] == 0 {
		c[0] = T(math.NaN())
	}
	want := naiveGemm(ta, tb, m, n, k, ab[0], a, lda, b, ldb, ab[1], c, ldc)
	before := slices.Clone(c) // c's padding, beyond column n of each row, must stay
	kernel(ta, tb, m, n, k, T(ab[0]), a, lda, b, ldb, T(ab[1]), c, ldc)
	for i := range m {
		for j := range ldc {
			got := float64(c[i*ldc+j])
			if j >= n {
				if c[i*ldc+j] != before[i*ldc+j] {
					t.Fatalf("%dx%dx%d ta=%v tb=%v: padding c[%d,%d] = %v, was %v", m, n, k, ta, tb, i, j, got, before[i*ldc+j])
				}
				continue
			}
			if w := want[i*n+j]; !(math.Abs(got-w) <= tol*(1+math.Sqrt(float64(k)))) {
				t.Fatalf("%dx%dx%d ta=%v tb=%v: c[%d,%d] = %v, want %v", m, n, k, ta, tb, i, j, got, w)
			}
		}
	}
}

// TestHasFMA checks the CPUID detection against the flags Linux lists in
// /proc/cpuinfo (avx2 and fma; the kernel lists avx only where the OS
// saves the YMM state), where there is one to read.
func TestHasFMA(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		if hasFMA {
			t.Fatalf("hasFMA on %s", runtime.GOARCH)
		}
		return
	}
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	var flags []string
	for line := range strings.Lines(string(info)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = strings.Fields(v)
			break
		}
	}
	if flags == nil {
		t.Skip("/proc/cpuinfo lists no flags")
	}
	want := slices.Contains(flags, "avx2") && slices.Contains(flags, "fma") && slices.Contains(flags, "avx")
	if hasFMA != want {
		t.Fatalf("hasFMA = %v, /proc/cpuinfo flags avx, avx2, fma say %v", hasFMA, want)
	}
	t.Logf("blocked AVX2/FMA kernel: %v", hasFMA)
}
