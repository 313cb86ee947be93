//go:build !openblas

package openblas

// Available reports whether the package was built against OpenBLAS: not
// without the openblas build tag.
const Available = false

// SetThreads does nothing without OpenBLAS.
func SetThreads(n int) {}

// Sgemm panics: the package was built without the openblas tag.
func Sgemm(ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	panic("openblas: built without -tags openblas")
}

// Dgemm panics: the package was built without the openblas tag.
func Dgemm(ta, tb bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	panic("openblas: built without -tags openblas")
}
