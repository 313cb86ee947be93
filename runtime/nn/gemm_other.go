//go:build !amd64

package nn

// hasFMA is false off amd64: gemm runs on gonum's GEMM there.
const hasFMA = false

func microKernel[T float](kc int, a, b, tile []T) { panic("nn: no micro-kernel on this architecture") }
