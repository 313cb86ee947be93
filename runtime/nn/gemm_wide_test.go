//go:build amd64

package nn

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestWideKernel checks the AVX-512 kernels against two calls of the AVX2
// ones, bit for bit, for both dtypes, several k, strided and packed A, and
// both ways of writing c. It runs only where useWide is on: a CPU with
// AVX-512 (unless built with -tags nogemmavx512).
func TestWideKernel(t *testing.T) {
	if !useWide {
		t.Skipf("AVX-512 kernels off (CPU has AVX-512: %v; -tags nogemmavx512 keeps them off)", hasAVX512)
	}
	for _, kc := range []int{1, 3, 4, 5, 17, 256} {
		for _, acc := range []bool{false, true} {
			t.Run(fmt.Sprintf("f64/k%d/acc%v", kc, acc), func(t *testing.T) { checkWide[float64](t, kc, acc) })
			t.Run(fmt.Sprintf("f32/k%d/acc%v", kc, acc), func(t *testing.T) { checkWide[float32](t, kc, acc) })
		}
	}
}

func checkWide[T float](t *testing.T, kc int, acc bool) {
	r := nr[T]()
	rng := NewRand(uint64(kc))
	fill := func(n int) []T {
		s := make([]T, n)
		for i := range s {
			s[i] = T(2*rng.Float64() - 1)
		}
		return s
	}
	const lda, ldc = 7, 3 // A rows 7 apart (strided), c rows 2nr+3 apart
	a, b := fill(microM*lda+kc), fill(2*kc*r)
	c0 := fill(microM * (2*r + ldc))
	want, got := slices.Clone(c0), slices.Clone(c0)
	microKernel(kc, a, lda, 1, b[:kc*r], want, 2*r+ldc, T(0.75), acc)
	microKernel(kc, a, lda, 1, b[kc*r:], want[r:], 2*r+ldc, T(0.75), acc)
	microKernelWide(kc, a, lda, 1, b, got, 2*r+ldc, T(0.75), acc)
	for i := range want {
		if math.Float64bits(float64(got[i])) != math.Float64bits(float64(want[i])) {
			t.Fatalf("c[%d] = %v, want %v (two AVX2 kernels)", i, got[i], want[i])
		}
	}
}

// TestHasAVX512 checks the CPUID detection against the avx512f flag Linux
// lists in /proc/cpuinfo, where there is one to read.
func TestHasAVX512(t *testing.T) {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	for line := range strings.Lines(string(info)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags := strings.Fields(v)
			want := slices.Contains(flags, "avx512f") && hasFMA
			if hasAVX512 != want {
				t.Fatalf("hasAVX512 = %v, /proc/cpuinfo flags avx512f (and hasFMA) say %v", hasAVX512, want)
			}
			t.Logf("AVX-512: %v; wide kernels in use: %v", hasAVX512, useWide)
			return
		}
	}
	t.Skip("/proc/cpuinfo lists no flags")
}
