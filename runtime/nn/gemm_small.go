package nn

import "unsafe"

// smallGemm is gemm's contract on the AVX-512 small-matrix kernels
// (gemm_small_amd64.s) where useSmall and the product is small; it reports
// false, having done nothing, elsewhere.
//
// Small means one tile and one k panel of the tiled path (m ≤ tileM,
// n ≤ tileN, k ≤ blockK): there the tiles run on one goroutine too, and on
// BenchmarkGEMMSmall's grid (m 8, 64, 144; n 12, 32, 64, 128; k 12, 64,
// 256; nn, nt, tn; both dtypes) this path ran 0.99–5× the tiles' speed
// (BENCHMARKS.md); at k = 1024, 144-row float64 products ran 0.91× (op(B),
// read in place once per 8 rows, no longer stays in cache), so k stops at
// one panel. op(B)'s transpose, k·n rounded up to whole vectors, then fits
// the packing buffer b.
//
// op(A) is read in place; op(B) too where B is not transposed. C's columns
// are cut into pairs of vectors, the last masked; its rows into blocks of
// 16 and 8 (one vector: where it covers the columns), 8, 4, then single
// rows. Each
// element of C is beta·c (beta ∉ {0, 1}: scaled first), then + alpha·(one
// FMA chain over all of k, in k order): the result depends only on the
// shape, not on threads or timing.
func smallGemm[T float](ta, tb bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) bool {
	lanes := nr[T]() // one 512-bit vector
	np := (n + lanes - 1) / lanes
	if !useSmall || k == 0 || m > tileM || n > tileN || k > blockK {
		return false
	}
	// Bounds: the kernels read op(A)'s m×k, op(B)'s k×n and C's m×n.
	rs, ks := lda, 1
	if ta {
		rs, ks = 1, lda
	}
	_ = a[(m-1)*rs+(k-1)*ks]
	_ = c[(m-1)*ldc+n-1]
	if beta != 0 && beta != 1 {
		for i := range m {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				row[j] *= beta
			}
		}
	}
	acc := 0
	if beta != 0 {
		acc = 1
	}
	size := int(unsafe.Sizeof(a[0]))
	var buf *packBufs[T]
	bp, bs, b2 := b, ldb, lanes*size
	if tb {
		_ = b[(n-1)*ldb+k-1]
		buf = getPack[T]()
		bp, bs, b2 = buf.b, lanes, k*lanes*size
		for p := range np {
			j0, dst := p*lanes, buf.b[p*k*lanes:(p+1)*k*lanes]
			if j0+lanes <= n {
				packColumns(dst, b[j0*ldb:], k, ldb)
				continue
			}
			for j := j0; j < n; j++ {
				d := dst[j-j0:]
				for l, v := range b[j*ldb : j*ldb+k] {
					d[l*lanes] = v
				}
			}
		}
	} else {
		_ = b[(k-1)*ldb+n-1]
	}
	for j0 := 0; j0 < n; j0 += 2 * lanes {
		cols := min(2*lanes, n-j0)
		m1, m2 := laneMask(min(cols, lanes)), laneMask(cols-lanes)
		bj := bp[j0:]
		if tb {
			bj = bp[j0*k:]
		}
		b2 := b2
		if m2 == 0 {
			// The kernels load the second vector under an empty mask:
			// pointed past what was written (the packing buffer's
			// untouched pages), each such load cost a microcode assist
			// (8x12x64/nt float32: 1.4 GFLOP/s). Point it at the first.
			b2 = 0
		}
		i, vecs := 0, 2
		if m2 == 0 {
			vecs = 1
			for ; i+16 <= m; i += 16 {
				smallKernel(16, 1, k, a[i*rs:], rs, ks, bj, bs, b2, c[i*ldc+j0:], ldc, m1, 0, acc, alpha)
			}
		}
		for ; i+8 <= m; i += 8 {
			smallKernel(8, vecs, k, a[i*rs:], rs, ks, bj, bs, b2, c[i*ldc+j0:], ldc, m1, m2, acc, alpha)
		}
		for ; i+4 <= m; i += 4 {
			smallKernel(4, 2, k, a[i*rs:], rs, ks, bj, bs, b2, c[i*ldc+j0:], ldc, m1, m2, acc, alpha)
		}
		for ; i < m; i++ {
			smallKernel(1, 2, k, a[i*rs:], rs, ks, bj, bs, b2, c[i*ldc+j0:], ldc, m1, m2, acc, alpha)
		}
	}
	if buf != nil {
		putPack(buf)
	}
	return true
}

// laneMask is the opmask of the first n lanes (none for n ≤ 0).
func laneMask(n int) int {
	if n <= 0 {
		return 0
	}
	return 1<<n - 1
}
