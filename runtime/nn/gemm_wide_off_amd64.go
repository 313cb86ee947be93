//go:build !gemmavx512

package nn

// wideBuilt: without -tags gemmavx512 the AVX-512 kernels stay off (useWide).
const wideBuilt = false
