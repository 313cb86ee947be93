package nn

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// The blocked GEMM that gemm runs on where the CPU has AVX2 and FMA
// (hasFMA): C is cut into fixed tiles of up to tileRows×blockN, each
// computed whole by one goroutine; a tile walks k in panels of blockK,
// packs its columns of op(B) for the panel into contiguous micro-panels of
// nr(T) columns per k step once, then, for each blockM rows, those rows of
// op(A) into micro-panels of microM rows (both padded with zeros), and runs
// the assembly micro-kernel on every pair (gemm_amd64.s: a microM×nr(T)
// block of FMA chains in k order). Every element of C is thus
// beta·c + alpha·(panel 1's sum) + alpha·(panel 2's sum) + ..., each sum an
// FMA chain in k order: the same arithmetic whatever the number of threads.
const (
	microM = 6
	blockM = 12 * microM // 72
	// tileRows is the height of a tile: the packed B panel serves this
	// many rows.
	tileRows = 4 * blockM
	blockN   = 128
	blockK   = 256
)

// nr is the micro-kernel's width in columns: one pair of 256-bit registers.
func nr[T float]() int {
	var z T
	if _, ok := any(z).(float32); ok {
		return 16
	}
	return 8
}

var pack32, pack64 sync.Pool // *[]float32, *[]float64 packing buffers

func getPack[T float](n int) *[]T {
	var z T
	var p any
	if _, ok := any(z).(float32); ok {
		p = pack32.Get()
	} else {
		p = pack64.Get()
	}
	if b, ok := p.(*[]T); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]T, n)
	return &b
}

func putPack[T float](b *[]T) {
	if _, ok := any(*b).([]float32); ok {
		pack32.Put(b)
	} else {
		pack64.Put(b)
	}
}

// blockedGemm is gemm's contract (c = alpha·op(a)·op(b) + beta·c,
// row-major) on the micro-kernel; m, n > 0.
func blockedGemm[T float](ta, tb bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if k == 0 {
		for i := range m {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				if beta == 0 {
					row[j] = 0
				} else {
					row[j] *= beta
				}
			}
		}
		return
	}
	tm, tn := (m+tileRows-1)/tileRows, (n+blockN-1)/blockN
	tiles := tm * tn
	w := &gemmWork[T]{ta: ta, tb: tb, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc, tn: tn}
	workers := min(runtime.GOMAXPROCS(0), tiles)
	if workers <= 1 {
		w.run(tiles)
		return
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { w.run(tiles) })
	}
	wg.Wait()
}

type gemmWork[T float] struct {
	ta, tb      bool
	m, n, k     int
	alpha, beta T
	a, b, c     []T
	lda, ldb    int
	ldc, tn     int
	next        atomic.Int64
}

// run computes tiles until none is left.
func (w *gemmWork[T]) run(tiles int) {
	r := nr[T]()
	kb := min(blockK, w.k)
	buf := getPack[T](blockM*kb + kb*blockN + microM*r)
	defer putPack(buf)
	ap, bp, tile := (*buf)[:blockM*kb], (*buf)[blockM*kb:blockM*kb+kb*blockN], (*buf)[blockM*kb+kb*blockN:]
	for t := int(w.next.Add(1) - 1); t < tiles; t = int(w.next.Add(1) - 1) {
		i0, j0 := (t/w.tn)*tileRows, (t%w.tn)*blockN
		w.tile(i0, j0, min(tileRows, w.m-i0), min(blockN, w.n-j0), ap, bp, tile)
	}
}

// tile computes c[i0:i0+mt, j0:j0+nb].
func (w *gemmWork[T]) tile(i0, j0, mt, nb int, ap, bp, tile []T) {
	r := nr[T]()
	np := (nb + r - 1) / r
	for p0 := 0; p0 < w.k; p0 += blockK {
		kb := min(blockK, w.k-p0)
		w.packB(bp, j0, nb, p0, kb)
		for ib := i0; ib < i0+mt; ib += blockM {
			mb := min(blockM, i0+mt-ib)
			w.packA(ap, ib, mb, p0, kb)
			w.block(ap, bp, tile, ib, j0, mb, nb, np, p0, kb)
		}
	}
}

// block runs the micro-kernel over the packed rows ib..ib+mb-1 and columns
// j0..j0+nb-1 (np micro-panels) of k panel p0 and adds the results to c.
func (w *gemmWork[T]) block(ap, bp, tile []T, ib, j0, mb, nb, np, p0, kb int) {
	r := nr[T]()
	mp := (mb + microM - 1) / microM
	for jp := range np {
		bpan := bp[jp*kb*r : (jp+1)*kb*r]
		cols := min(r, nb-jp*r)
		for ip := range mp {
			microKernel(kb, ap[ip*kb*microM:(ip+1)*kb*microM], bpan, tile)
			rows := min(microM, mb-ip*microM)
			for ri := range rows {
				row := w.c[(ib+ip*microM+ri)*w.ldc+j0+jp*r:]
				row = row[:cols]
				tr := tile[ri*r : ri*r+cols]
				switch {
				case p0 > 0 || w.beta == 1:
					for j, v := range tr {
						row[j] += w.alpha * v
					}
				case w.beta == 0:
					for j, v := range tr {
						row[j] = w.alpha * v
					}
				default:
					for j, v := range tr {
						row[j] = w.beta*row[j] + w.alpha*v
					}
				}
			}
		}
	}
}

// packA packs rows i0..i0+mb-1 of op(A), columns p0..p0+kb-1, into
// micro-panels of microM rows: ap[(ip·kb + l)·microM + r].
func (w *gemmWork[T]) packA(ap []T, i0, mb, p0, kb int) {
	mp := (mb + microM - 1) / microM
	for ip := range mp {
		pan := ap[ip*kb*microM : (ip+1)*kb*microM]
		for r := range microM {
			i := i0 + ip*microM + r
			if i >= i0+mb {
				for l := range kb {
					pan[l*microM+r] = 0
				}
				continue
			}
			if w.ta {
				for l := range kb {
					pan[l*microM+r] = w.a[(p0+l)*w.lda+i]
				}
			} else {
				src := w.a[i*w.lda+p0 : i*w.lda+p0+kb]
				for l, v := range src {
					pan[l*microM+r] = v
				}
			}
		}
	}
}

// packB packs columns j0..j0+nb-1 of op(B), rows p0..p0+kb-1, into
// micro-panels of nr columns: bp[(jp·kb + l)·nr + c].
func (w *gemmWork[T]) packB(bp []T, j0, nb, p0, kb int) {
	r := nr[T]()
	np := (nb + r - 1) / r
	for jp := range np {
		pan := bp[jp*kb*r : (jp+1)*kb*r]
		cols := min(r, nb-jp*r)
		jb := j0 + jp*r
		for l := range kb {
			dst := pan[l*r : (l+1)*r]
			if w.tb {
				for cc := range cols {
					dst[cc] = w.b[(jb+cc)*w.ldb+p0+l]
				}
			} else {
				src := w.b[(p0+l)*w.ldb+jb : (p0+l)*w.ldb+jb+cols]
				for cc, v := range src {
					dst[cc] = v
				}
			}
			clear(dst[cols:])
		}
	}
}
