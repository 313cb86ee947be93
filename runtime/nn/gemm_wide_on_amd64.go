//go:build gemmavx512

package nn

// wideBuilt: built with -tags gemmavx512, the tiles run the AVX-512 kernels
// where the CPU has AVX-512 (useWide).
const wideBuilt = true
