//go:build !amd64

package nn

// hasFMA is false off amd64: gemm runs on gonum's GEMM there.
const hasFMA = false

// useWide is false off amd64: no AVX-512 kernels.
const useWide = false

func microKernelWide[T float](kc int, a []T, rs, ks int, b, c []T, ldc int, alpha T, acc bool) {
	panic("nn: no micro-kernel on this architecture")
}

// fmaLoop does nothing off amd64: the benchmarks report no peak there.
func fmaLoop(n int) {}

func microKernel[T float](kc int, a []T, rs, ks int, b, c []T, ldc int, alpha T, acc bool) {
	panic("nn: no micro-kernel on this architecture")
}

// packRows copies kb rows of nr(T) elements, row l from src[l·ld:], to
// dst[l·nr:].
func packRows[T float](dst, src []T, kb, ld int) {
	r := nr[T]()
	for l := range kb {
		copy(dst[l*r:l*r+r], src[l*ld:l*ld+r])
	}
}

// packColumns sets dst[l·nr + c] = src[c·ld + l] for c < nr(T), l < kb.
func packColumns[T float](dst, src []T, kb, ld int) {
	r := nr[T]()
	for c := range r {
		for l := range kb {
			dst[l*r+c] = src[c*ld+l]
		}
	}
}

// packRowsOfA copies kb runs of microM elements, run l from src[l·ld:], to
// dst[l·microM:].
func packRowsOfA[T float](dst, src []T, kb, ld int) {
	for l := range kb {
		copy(dst[l*microM:l*microM+microM], src[l*ld:l*ld+microM])
	}
}

// useSmall is false off amd64: no AVX-512 small-matrix kernels.
var useSmall = false

func smallKernel[T float](rows, vecs, kc int, a []T, rs, ks int, b []T, bs, b2 int, c []T, ldc int, m1, m2, acc int, alpha T) {
	panic("nn: no small-matrix kernel on this architecture")
}
