package nn

// The AVX2/FMA micro-kernels of gemm_amd64.s.

//go:noescape
func kern6x8d(kc int, a, b, c *float64)

//go:noescape
func kern6x16s(kc int, a, b, c *float32)

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

// microKernel runs the micro-kernel of T's width: tile = the kc-long sum of
// the packed panels a (mr per step) and b (nr per step).
func microKernel[T float](kc int, a, b, tile []T) {
	switch a := any(a).(type) {
	case []float64:
		kern6x8d(kc, &a[0], &any(b).([]float64)[0], &any(tile).([]float64)[0])
	case []float32:
		kern6x16s(kc, &a[0], &any(b).([]float32)[0], &any(tile).([]float32)[0])
	}
}
