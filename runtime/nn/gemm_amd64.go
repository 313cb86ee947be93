package nn

import "unsafe"

// The AVX2/FMA micro-kernels of gemm_amd64.s, their AVX-512 pairs and the
// packing routines.

//go:noescape
func kern6x8d(kc int, a *float64, rs, ks int, b, c *float64, ldc int, alpha float64, acc int)

//go:noescape
func kern6x16s(kc int, a *float32, rs, ks int, b, c *float32, ldc int, alpha float32, acc int)

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

func xgetbv() (eax, edx uint32)

// hasFMA reports whether the CPU and the OS support AVX2 and FMA (CPUID
// leaf 1: FMA, OSXSAVE, AVX; XCR0: the XMM and YMM state; leaf 7: AVX2).
var hasFMA = func() bool {
	max, _, _, _ := cpuid(0, 0)
	if max < 7 {
		return false
	}
	_, _, c1, _ := cpuid(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if c1&fma == 0 || c1&osxsave == 0 || c1&avx == 0 {
		return false
	}
	if lo, _ := xgetbv(); lo&6 != 6 {
		return false
	}
	_, b7, _, _ := cpuid(7, 0)
	return b7&(1<<5) != 0
}()

// hasAVX512 reports whether the CPU and the OS support AVX-512F (CPUID leaf
// 7: AVX512F; XCR0: the opmask and ZMM state besides XMM and YMM).
var hasAVX512 = func() bool {
	if !hasFMA {
		return false
	}
	if lo, _ := xgetbv(); lo&0xe6 != 0xe6 {
		return false
	}
	_, b7, _, _ := cpuid(7, 0)
	return b7&(1<<16) != 0
}()

// useWide is whether the tiles run microKernelWide: where the CPU has
// AVX-512, unless the package was built with -tags nogemmavx512. The wide
// kernels give the bits of two AVX2 kernel calls (TestWideKernel, which
// runs where the CPU has AVX-512, and TestGemmAgainstNaive through them).
var useWide = wideBuilt && hasAVX512

// microKernelWide is microKernel on two adjacent micro-panels of b (2·kc·nr
// elements) at once, a microM×2nr block of c, in AVX-512 registers: the
// same FMA chains, so the same bits, as two calls of microKernel.
func microKernelWide[T float](kc int, a []T, rs, ks int, b, c []T, ldc int, alpha T, acc bool) {
	r := nr[T]()
	_, _, _ = a[(microM-1)*rs+(kc-1)*ks], b[2*kc*r-1], c[(microM-1)*ldc+2*r-1]
	ac := 0
	if acc {
		ac = 1
	}
	switch a := any(a).(type) {
	case []float64:
		kern6x16dw(kc, &a[0], rs, ks, &any(b).([]float64)[0], &any(c).([]float64)[0], ldc, float64(alpha), ac)
	case []float32:
		kern6x32sw(kc, &a[0], rs, ks, &any(b).([]float32)[0], &any(c).([]float32)[0], ldc, float32(alpha), ac)
	}
}

// microKernel runs the micro-kernel of T's width: for the sums
// s[i][j] = Σ_l A[i][l]·b[l·nr+j], i < microM, j < nr, l < kc, each an FMA
// chain in l order, with A[i][l] = a[i·rs + l·ks], it sets the microM×nr
// block at c (rows ldc apart) to alpha·s, or where acc adds alpha·s to it
// with one FMA. It checks that a, b and c hold what it reads and writes.
func microKernel[T float](kc int, a []T, rs, ks int, b, c []T, ldc int, alpha T, acc bool) {
	r := nr[T]()
	_, _, _ = a[(microM-1)*rs+(kc-1)*ks], b[kc*r-1], c[(microM-1)*ldc+r-1]
	ac := 0
	if acc {
		ac = 1
	}
	switch a := any(a).(type) {
	case []float64:
		kern6x8d(kc, &a[0], rs, ks, &any(b).([]float64)[0], &any(c).([]float64)[0], ldc, float64(alpha), ac)
	case []float32:
		kern6x16s(kc, &a[0], rs, ks, &any(b).([]float32)[0], &any(c).([]float32)[0], ldc, float32(alpha), ac)
	}
}

// fmaLoop runs n steps of 12 independent 256-bit float32 FMAs: the
// benchmarks time it for the core's peak.
func fmaLoop(n int)

//go:noescape
func packLines(dst, src *byte, n, stride int)

//go:noescape
func packA6(dst, src *byte, n, stride, width int)

//go:noescape
func packT8d(dst, src *float64, n, ld int)

//go:noescape
func packT16s(dst, src *float32, n, ld int)

// packRows copies kb rows of nr(T) elements, row l from src[l·ld:], to
// dst[l·nr:] (a micro-panel of op(B) where B is not transposed).
func packRows[T float](dst, src []T, kb, ld int) {
	r := nr[T]()
	_, _ = dst[kb*r-1], src[(kb-1)*ld+r-1]
	packLines((*byte)(unsafe.Pointer(&dst[0])), (*byte)(unsafe.Pointer(&src[0])), kb, ld*int(unsafe.Sizeof(src[0])))
}

// packColumns sets dst[l·nr + c] = src[c·ld + l] for c < nr(T), l < kb (a
// micro-panel of op(B) where B is transposed): 4 steps of l at a time in
// assembly, the rest here.
func packColumns[T float](dst, src []T, kb, ld int) {
	r := nr[T]()
	_, _ = dst[kb*r-1], src[(r-1)*ld+kb-1]
	k4 := kb &^ 3
	if k4 > 0 {
		switch d := any(dst).(type) {
		case []float64:
			packT8d(&d[0], &any(src).([]float64)[0], k4, ld)
		case []float32:
			packT16s(&d[0], &any(src).([]float32)[0], k4, ld)
		}
	}
	for c := range r {
		for l := k4; l < kb; l++ {
			dst[l*r+c] = src[c*ld+l]
		}
	}
}

// packRowsOfA copies kb runs of microM elements, run l from src[l·ld:], to
// dst[l·microM:] (a micro-panel of op(A) where A is transposed).
func packRowsOfA[T float](dst, src []T, kb, ld int) {
	_, _ = dst[kb*microM-1], src[(kb-1)*ld+microM-1]
	size := int(unsafe.Sizeof(src[0]))
	packA6((*byte)(unsafe.Pointer(&dst[0])), (*byte)(unsafe.Pointer(&src[0])), kb, ld*size, microM*size)
}

//go:noescape
func kern6x16dw(kc int, a *float64, rs, ks int, b, c *float64, ldc int, alpha float64, acc int)

//go:noescape
func kern6x32sw(kc int, a *float32, rs, ks int, b, c *float32, ldc int, alpha float32, acc int)
