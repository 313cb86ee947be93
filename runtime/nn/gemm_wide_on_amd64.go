//go:build !nogemmavx512

package nn

// wideBuilt: the tiles run the AVX-512 kernels where the CPU has AVX-512
// (useWide); -tags nogemmavx512 keeps them off (an A/B against the AVX2
// kernels on one machine).
const wideBuilt = true
