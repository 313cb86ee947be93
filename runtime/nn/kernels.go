package nn

import (
	"runtime"
	"sync"
)

// parallelGrain is the number of multiply-adds below which a kernel runs on
// the calling goroutine.
const parallelGrain = 1 << 16

// parallelFor calls fn over a partition of [0, n) into contiguous chunks,
// concurrently when the total work (multiply-adds) is large enough. Each
// index is handled by exactly one call, so kernels that compute each output
// element within one index give the same result however [0, n) is split.
func parallelFor(n, work int, fn func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if c := work / parallelGrain; c < workers {
		workers = c
	}
	if workers > n {
		workers = n
	}
	if workers < 2 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// axpy sets y += a*x elementwise; len(y) >= len(x).
func axpy[T float](a T, x, y []T) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}

// axpy4 sets y += a0*x0 + a1*x1 + a2*x2 + a3*x3 elementwise, adding the
// terms one at a time in that order (so it rounds exactly as four axpy
// calls would) but loading and storing y once.
func axpy4[T float](a0, a1, a2, a3 T, x0, x1, x2, x3, y []T) {
	n := len(y)
	x0, x1, x2, x3 = x0[:n], x1[:n], x2[:n], x3[:n]
	for j := range y {
		v := y[j]
		v += a0 * x0[j]
		v += a1 * x1[j]
		v += a2 * x2[j]
		v += a3 * x3[j]
		y[j] = v
	}
}

// dot returns Σ x[i]*y[i]; len(y) >= len(x). It sums in four interleaved
// partial sums, in a fixed order.
func dot[T float](x, y []T) T {
	y = y[:len(x)]
	var s0, s1, s2, s3 T
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// linearForward sets y = x·w + b for x [rows,in], w [in,out], b [out],
// y [rows,out]. Each y[r,o] is b[o] plus the terms x[r,i]·w[i,o] added in
// increasing i.
func linearForward[T float](x, w, b, y []T, rows, in, out int) {
	parallelFor(rows, rows*in*out, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			yr := y[r*out : (r+1)*out]
			copy(yr, b)
			xr := x[r*in : (r+1)*in]
			i := 0
			for ; i+4 <= in; i += 4 {
				axpy4(xr[i], xr[i+1], xr[i+2], xr[i+3],
					w[i*out:(i+1)*out], w[(i+1)*out:(i+2)*out], w[(i+2)*out:(i+3)*out], w[(i+3)*out:(i+4)*out], yr)
			}
			for ; i < in; i++ {
				axpy(xr[i], w[i*out:(i+1)*out], yr)
			}
		}
	})
}

// linearBackwardInput sets dx = dy·wᵀ for dy [rows,out], w [in,out],
// dx [rows,in].
func linearBackwardInput[T float](dy, w, dx []T, rows, in, out int) {
	parallelFor(rows, rows*in*out, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			dyr := dy[r*out : (r+1)*out]
			dxr := dx[r*in : (r+1)*in]
			for i := range dxr {
				dxr[i] = dot(dyr, w[i*out:(i+1)*out])
			}
		}
	})
}

// linearBackwardWeight adds xᵀ·dy to dw [in,out] and the column sums of dy
// to db [out], for x [rows,in] and dy [rows,out]. Every element gets its
// terms added one at a time in increasing row order, however the work is
// split.
func linearBackwardWeight[T float](x, dy, dw, db []T, rows, in, out int) {
	parallelFor((in+3)/4, rows*in*out, func(lo, hi int) {
		for i := 4 * lo; i < min(4*hi, in); i += 4 {
			if i+4 > in {
				for ; i < in; i++ {
					dwi := dw[i*out : (i+1)*out]
					for r := 0; r < rows; r++ {
						axpy(x[r*in+i], dy[r*out:(r+1)*out], dwi)
					}
				}
				break
			}
			dw0, dw1, dw2, dw3 := dw[i*out:(i+1)*out], dw[(i+1)*out:(i+2)*out], dw[(i+2)*out:(i+3)*out], dw[(i+3)*out:(i+4)*out]
			for r := 0; r < rows; r++ {
				xr, dyr := x[r*in+i:r*in+i+4], dy[r*out:(r+1)*out]
				axpyTo4(xr[0], xr[1], xr[2], xr[3], dyr, dw0, dw1, dw2, dw3)
			}
		}
	})
	for r := 0; r < rows; r++ {
		axpy(1, dy[r*out:(r+1)*out], db)
	}
}

// axpyTo4 sets yk += ak*x for k = 0..3, loading x once.
func axpyTo4[T float](a0, a1, a2, a3 T, x, y0, y1, y2, y3 []T) {
	n := len(x)
	y0, y1, y2, y3 = y0[:n], y1[:n], y2[:n], y3[:n]
	for j, v := range x {
		y0[j] += a0 * v
		y1[j] += a1 * v
		y2[j] += a2 * v
		y3[j] += a3 * v
	}
}
