package nn

import (
	"gonum.org/v1/gonum/blas"
	blasgonum "gonum.org/v1/gonum/blas/gonum"
)

// axpy sets y += a*x elementwise; len(y) >= len(x).
func axpy[T float](a T, x, y []T) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}

// Every matrix product (a Linear's three, attention's per-head ones) goes
// through gemm below. Where the CPU has AVX2 and FMA (hasFMA, amd64) it runs
// on the package's own blocked kernel (blocked.go, gemm_amd64.s); elsewhere
// on gonum's GEMM (blas/gonum, pure Go with SSE inner loops). Either way its
// results depend only on the matrix sizes, never on GOMAXPROCS: both split C
// into fixed tiles, each computed by one goroutine summing k in a fixed
// order (TestParallelDeterministic checks it), so a pipeline stage and the
// sequential reference, given micro-batches of the same shape, round alike.
// The two kernels round differently (FMA chains against gonum's separate
// multiply and add): results are reproducible on one machine, not across
// CPUs with and without FMA.

// gemm sets c = alpha·op(a)·op(b) + beta·c, row-major, for c [m,n] and
// op(a) [m,k], op(b) [k,n] (op: transpose when ta or tb).
func gemm[T float](ta, tb bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if hasFMA {
		blockedGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	gonumGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gonumGemm is gemm on gonum's Dgemm and Sgemm.
func gonumGemm[T float](ta, tb bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	transA, transB := blas.NoTrans, blas.NoTrans
	if ta {
		transA = blas.Trans
	}
	if tb {
		transB = blas.Trans
	}
	switch any(a).(type) {
	case []float64:
		blasgonum.Implementation{}.Dgemm(transA, transB, m, n, k, float64(alpha), any(a).([]float64), lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
	case []float32:
		blasgonum.Implementation{}.Sgemm(transA, transB, m, n, k, float32(alpha), any(a).([]float32), lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	}
}

// linearForward sets y = x·w + b for x [rows,in], w [in,out], b [out],
// y [rows,out]: each row of y starts as b, then GEMM adds x·w.
func linearForward[T float](x, w, b, y []T, rows, in, out int) {
	for r := range rows {
		copy(y[r*out:(r+1)*out], b)
	}
	gemm(false, false, rows, out, in, 1, x, max(in, 1), w, max(out, 1), 1, y, max(out, 1))
}

// linearBackwardInput sets dx = dy·wᵀ for dy [rows,out], w [in,out],
// dx [rows,in].
func linearBackwardInput[T float](dy, w, dx []T, rows, in, out int) {
	if out == 0 {
		clear(dx[:rows*in])
		return
	}
	gemm(false, true, rows, in, out, 1, dy, out, w, out, 0, dx, max(in, 1))
}

// linearBackwardWeight adds xᵀ·dy to dw [in,out] and the column sums of dy
// to db [out], for x [rows,in] and dy [rows,out].
func linearBackwardWeight[T float](x, dy, dw, db []T, rows, in, out int) {
	if rows > 0 {
		gemm(true, false, in, out, rows, 1, x, max(in, 1), dy, max(out, 1), 1, dw, max(out, 1))
	}
	for r := 0; r < rows; r++ {
		axpy(1, dy[r*out:(r+1)*out], db)
	}
}
