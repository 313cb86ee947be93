package nn

import "unsafe"

// The AVX-512 small-matrix path of gemm_small_amd64.s: no tiles, no
// goroutines, op(A) and op(B) read where they are (op(B) transposed into
// micro-panels only where B is transposed), C's column edge masked.

//go:noescape
func small8x2d(kc int, a *float64, rs, ks int, b *float64, bs, b2 int, c *float64, ldc int, m1, m2 int, acc int, alpha float64)

//go:noescape
func small8x2s(kc int, a *float32, rs, ks int, b *float32, bs, b2 int, c *float32, ldc int, m1, m2 int, acc int, alpha float32)

//go:noescape
func small16x1d(kc int, a *float64, rs, ks int, b *float64, bs, b2 int, c *float64, ldc int, m1, m2 int, acc int, alpha float64)

//go:noescape
func small16x1s(kc int, a *float32, rs, ks int, b *float32, bs, b2 int, c *float32, ldc int, m1, m2 int, acc int, alpha float32)

//go:noescape
func small1x2d(kc int, a *float64, rs, ks int, b *float64, bs, b2 int, c *float64, ldc int, m1, m2 int, acc int, alpha float64)

//go:noescape
func small1x2s(kc int, a *float32, rs, ks int, b *float32, bs, b2 int, c *float32, ldc int, m1, m2 int, acc int, alpha float32)

//go:noescape
func small8x1d(kc int, a *float64, rs, ks int, b *float64, bs, b2 int, c *float64, ldc int, m1, m2 int, acc int, alpha float64)

//go:noescape
func small8x1s(kc int, a *float32, rs, ks int, b *float32, bs, b2 int, c *float32, ldc int, m1, m2 int, acc int, alpha float32)

//go:noescape
func small4x2d(kc int, a *float64, rs, ks int, b *float64, bs, b2 int, c *float64, ldc int, m1, m2 int, acc int, alpha float64)

//go:noescape
func small4x2s(kc int, a *float32, rs, ks int, b *float32, bs, b2 int, c *float32, ldc int, m1, m2 int, acc int, alpha float32)

// useSmall is whether blockedGemm hands small products to smallGemm: with
// the AVX-512 kernels (useWide).
var useSmall = useWide

// smallKernel runs the small kernel of rows×vecs blocks (16×1, 8×1, 8×2,
// 4×2 or 1×2; a ×1 kernel uses only the first vector) at A[i][l] = a[i·rs + l·ks], op(B)'s row l at b[l·bs:]
// (its second vector b2 bytes after the first), c's rows ldc apart, lane
// masks m1 and m2. The caller has checked the bounds (smallGemm).
func smallKernel[T float](rows, vecs, kc int, a []T, rs, ks int, b []T, bs, b2 int, c []T, ldc int, m1, m2, acc int, alpha T) {
	switch a := any(a).(type) {
	case []float64:
		pa, pb := unsafe.SliceData(a), unsafe.SliceData(any(b).([]float64))
		pc := unsafe.SliceData(any(c).([]float64))
		switch {
		case rows == 16:
			small16x1d(kc, pa, rs, ks, pb, bs, b2, pc, ldc, m1, m2, acc, float64(alpha))
		case rows == 8 && vecs == 1:
			small8x1d(kc, pa, rs, ks, pb, bs, b2, pc, ldc, m1, m2, acc, float64(alpha))
		case rows == 8:
			small8x2d(kc, pa, rs, ks, pb, bs, b2, pc, ldc, m1, m2, acc, float64(alpha))
		case rows == 4:
			small4x2d(kc, pa, rs, ks, pb, bs, b2, pc, ldc, m1, m2, acc, float64(alpha))
		default:
			small1x2d(kc, pa, rs, ks, pb, bs, b2, pc, ldc, m1, m2, acc, float64(alpha))
		}
	case []float32:
		pa, pb := unsafe.SliceData(a), unsafe.SliceData(any(b).([]float32))
		pc := unsafe.SliceData(any(c).([]float32))
		switch {
		case rows == 16:
			small16x1s(kc, pa, rs, ks, pb, bs, b2, pc, ldc, m1, m2, acc, float32(alpha))
		case rows == 8 && vecs == 1:
			small8x1s(kc, pa, rs, ks, pb, bs, b2, pc, ldc, m1, m2, acc, float32(alpha))
		case rows == 8:
			small8x2s(kc, pa, rs, ks, pb, bs, b2, pc, ldc, m1, m2, acc, float32(alpha))
		case rows == 4:
			small4x2s(kc, pa, rs, ks, pb, bs, b2, pc, ldc, m1, m2, acc, float32(alpha))
		default:
			small1x2s(kc, pa, rs, ks, pb, bs, b2, pc, ldc, m1, m2, acc, float32(alpha))
		}
	}
}
