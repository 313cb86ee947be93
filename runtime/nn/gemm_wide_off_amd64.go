//go:build nogemmavx512

package nn

// wideBuilt: with -tags nogemmavx512 the AVX-512 kernels stay off (useWide).
const wideBuilt = false
