//go:build !amd64

package nn

// hasFMA is false off amd64: gemm runs on gonum's GEMM there.
const hasFMA = false

func microKernel[T float](kc int, a []T, rs, ks int, b, c []T, ldc int, alpha T, acc bool) {
	panic("nn: no micro-kernel on this architecture")
}
