package nn

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The blocked GEMM that gemm runs on where the CPU has AVX2 and FMA
// (hasFMA). C is cut into fixed tiles of up to tileM×tileN, each computed
// whole by one goroutine. A tile walks k in panels of blockK; for each panel
// it packs its columns of op(B) into contiguous micro-panels of nr(T)
// columns per k step (zero-padded), then runs the assembly micro-kernel
// (gemm_amd64.s; with AVX-512, useWide, on two micro-panels at once) on
// every micro-panel and every microM rows of op(A), blockM rows at a time
// per micro-panel. The kernel reads op(A) where it is, strided (packing it
// costs about what it saves at the examples' shapes), except where A is
// transposed with rows far apart (packsA). It computes a microM×nr(T) block
// of FMA chains in k order and adds it into C itself; a block that C's edge
// cuts goes through a scratch block (the microM rows ending with its last,
// so A is still read in place). Every element of C is thus beta·c, then
// + alpha·(panel 1's sum), + alpha·(panel 2's sum), ..., each sum an FMA
// chain in k order: the same arithmetic whatever the number of threads,
// since tiles, panels and blocks depend only on the shape. A product of
// one tile and one k panel goes to smallGemm instead where the CPU has
// AVX-512 (useSmall; gemm_small.go).
const (
	microM = 6
	blockM = 12 * microM // rows of op(A) one B micro-panel meets in a row: 144 KiB of float64 at blockK
	blockK = 256
	// tileM×tileN is the most one goroutine computes: the packed B panel
	// (blockK×tileN, 256 KiB of float64) serves tileM rows; op(A) is read
	// in place, so narrow tiles cost little and give threads work to share.
	tileM = 2 * blockM
	tileN = 128
)

// nr is the micro-kernel's width in columns: one pair of 256-bit registers,
// 64 bytes.
func nr[T float]() int {
	var z T
	if _, ok := any(z).(float32); ok {
		return 16
	}
	return 8
}

// packBufs are one goroutine's packing buffers: a for blockM rows of op(A)
// where A is transposed (or op(A) when it has fewer than microM rows), b
// for tileN columns of op(B), edge for one micro-kernel block.
type packBufs[T float] struct {
	a, b, edge []T
}

// free32 and free64 keep the packing buffers of finished products for the
// next (up to one per CPU each: 128 KiB for float32, 256 KiB for float64),
// unlike a sync.Pool, which the garbage collector empties: a product
// allocates nothing once as many have run at once as run at a time. One
// buffer of each waits in spare32 and spare64 first: an atomic swap
// instead of the channel's lock saved 20–25 ns of 255–365 ns (mean of 4
// alternated runs) at 8×32×32 with op(B) transposed (smallGemm).
var (
	free32  = make(chan *packBufs[float32], runtime.NumCPU())
	free64  = make(chan *packBufs[float64], runtime.NumCPU())
	spare32 atomic.Pointer[packBufs[float32]]
	spare64 atomic.Pointer[packBufs[float64]]
)

func freeList[T float]() (chan *packBufs[T], *atomic.Pointer[packBufs[T]]) {
	var c, s any
	var z T
	if _, ok := any(z).(float32); ok {
		c, s = free32, &spare32
	} else {
		c, s = free64, &spare64
	}
	return c.(chan *packBufs[T]), s.(*atomic.Pointer[packBufs[T]])
}

func getPack[T float]() *packBufs[T] {
	free, spare := freeList[T]()
	if b := spare.Swap(nil); b != nil {
		return b
	}
	select {
	case b := <-free:
		return b
	default:
	}
	r := nr[T]()
	np := (tileN + r - 1) / r
	return &packBufs[T]{a: make([]T, blockM*blockK), b: make([]T, np*r*blockK), edge: make([]T, microM*r)}
}

func putPack[T float](b *packBufs[T]) {
	free, spare := freeList[T]()
	if spare.CompareAndSwap(nil, b) {
		return
	}
	select {
	case free <- b:
	default:
	}
}

// gemmArgs are one call's operands: gemm's contract.
type gemmArgs[T float] struct {
	ta, tb      bool
	m, n, k     int
	alpha, beta T
	a, b, c     []T
	lda, ldb    int
	ldc, tn     int
}

// blockedGemm is gemm's contract (c = alpha·op(a)·op(b) + beta·c,
// row-major) on the micro-kernel; m, n > 0.
func blockedGemm[T float](ta, tb bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if smallGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) {
		return
	}
	if beta != 1 && (k == 0 || beta != 0) {
		for i := range m {
			row := c[i*ldc : i*ldc+n]
			if beta == 0 {
				clear(row)
				continue
			}
			for j := range row {
				row[j] *= beta
			}
		}
		beta = 1
	}
	if k == 0 {
		return
	}
	tm, tn := (m+tileM-1)/tileM, (n+tileN-1)/tileN
	tiles := tm * tn
	w := gemmArgs[T]{ta: ta, tb: tb, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc, tn: tn}
	workers := min(runtime.GOMAXPROCS(0), tiles)
	if workers <= 1 {
		buf := getPack[T]()
		for t := range tiles {
			w.tileAt(t, buf)
		}
		putPack(buf)
		return
	}
	shared := new(gemmArgs[T]) // w itself stays on the stack of the one-goroutine path
	*shared = w
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := getPack[T]()
			defer putPack(buf)
			for t := int(next.Add(1) - 1); t < tiles; t = int(next.Add(1) - 1) {
				shared.tileAt(t, buf)
			}
		})
	}
	wg.Wait()
}

// tileAt computes tile t (row-major over the tiles) of c.
func (w *gemmArgs[T]) tileAt(t int, buf *packBufs[T]) {
	i0, j0 := (t/w.tn)*tileM, (t%w.tn)*tileN
	w.tile(i0, j0, min(tileM, w.m-i0), min(tileN, w.n-j0), buf)
}

// tile computes c[i0:i0+mt, j0:j0+nt].
func (w *gemmArgs[T]) tile(i0, j0, mt, nt int, buf *packBufs[T]) {
	r := nr[T]()
	np := (nt + r - 1) / r
	for p0 := 0; p0 < w.k; p0 += blockK {
		kb := min(blockK, w.k-p0)
		acc := p0 > 0 || w.beta != 0
		w.packB(buf.b, j0, nt, p0, kb)
		for ib := i0; ib < i0+mt; ib += blockM {
			mb := min(blockM, i0+mt-ib)
			packed := w.packsA()
			if packed {
				w.packColumnsOfA(buf.a, ib, mb, p0, kb)
			}
			for jp := 0; jp < np; jp++ {
				cols := min(r, nt-jp*r)
				// With AVX-512 (useWide) two full micro-panels at once.
				wide := useWide && (jp+2)*r <= nt
				bpan := buf.b[jp*kb*r : (jp+1)*kb*r]
				for i := ib; i < ib+mb; i += microM {
					rows := min(microM, ib+mb-i)
					at := i*w.ldc + j0 + jp*r
					if rows == microM && cols == r {
						ap, rs, ks := w.rowsOfA(i, p0)
						if packed {
							ap, rs, ks = buf.a[(i-ib)*kb:], 1, microM
						}
						if wide {
							microKernelWide(kb, ap, rs, ks, buf.b[jp*kb*r:(jp+2)*kb*r], w.c[at:], w.ldc, w.alpha, acc)
							continue
						}
						microKernel(kb, ap, rs, ks, bpan, w.c[at:], w.ldc, w.alpha, acc)
						continue
					}
					w.edge(buf, bpan, at, i, rows, cols, p0, kb, acc)
					if wide {
						w.edge(buf, buf.b[(jp+1)*kb*r:(jp+2)*kb*r], at+r, i, rows, r, p0, kb, acc)
					}
				}
				if wide {
					jp++
				}
			}
		}
	}
}

// edge computes a block that C's edge cuts, rows i..i+rows-1 and cols
// columns from c[at] (row i), for the packed micro-panel bpan: the microM
// rows ending with its last (or, in a matrix of fewer rows, its rows packed
// with zeros below) into buf.edge, then its rows and columns of that into
// c.
func (w *gemmArgs[T]) edge(buf *packBufs[T], bpan []T, at, i, rows, cols, p0, kb int, acc bool) {
	r := nr[T]()
	first := max(0, i+rows-microM)
	var ap []T
	rs, ks := 1, microM
	if first+microM <= w.m {
		ap, rs, ks = w.rowsOfA(first, p0)
	} else {
		ap = w.packShortA(buf.a, p0, kb)
	}
	microKernel(kb, ap, rs, ks, bpan, buf.edge, r, w.alpha, false)
	for ri := range rows {
		row := w.c[at+ri*w.ldc : at+ri*w.ldc+cols]
		e := buf.edge[(i-first+ri)*r : (i-first+ri)*r+cols]
		if acc {
			for j, v := range e {
				row[j] += v
			}
		} else {
			copy(row, e)
		}
	}
}

// packsA reports whether the tiles pack op(A) rather than read it in place:
// where A is transposed and its rows are 1 KiB or more apart. Read in
// place, each k step of the micro-kernel then loads a line that far from
// the last, beyond what the prefetchers follow, and at the power-of-two
// widths of the examples' layers (512: 2 or 4 KiB) those lines share one or
// two sets of the L1 cache: BenchmarkGEMM's attention/512x1536x256/tn ran
// 2.3× slower (float64) in place.
func (w *gemmArgs[T]) packsA() bool {
	var z T
	return w.ta && w.lda*int(unsafe.Sizeof(z)) >= 1024
}

// packColumnsOfA packs the full micro-panels of rows i0..i0+mb-1 of op(A),
// columns p0..p0+kb-1, where A is transposed: ap[(ip·kb + l)·microM + r].
func (w *gemmArgs[T]) packColumnsOfA(ap []T, i0, mb, p0, kb int) {
	for ip := range mb / microM {
		pan := ap[ip*kb*microM : (ip+1)*kb*microM]
		i := i0 + ip*microM
		packRowsOfA(pan, w.a[p0*w.lda+i:], kb, w.lda)
	}
}

// rowsOfA returns microM rows of op(A) from row i, column p0, as the
// micro-kernel reads them where they are: op(A)[i+r][p0+l] = ap[r·rs + l·ks].
func (w *gemmArgs[T]) rowsOfA(i, p0 int) (ap []T, rs, ks int) {
	if w.ta {
		return w.a[p0*w.lda+i:], 1, w.lda
	}
	return w.a[i*w.lda+p0:], w.lda, 1
}

// packShortA packs the m < microM rows of op(A), columns p0..p0+kb-1, into
// one micro-panel padded with zero rows: ap[l·microM + r].
func (w *gemmArgs[T]) packShortA(ap []T, p0, kb int) []T {
	pan := ap[:kb*microM]
	clear(pan)
	for r := range w.m {
		for l := range kb {
			if w.ta {
				pan[l*microM+r] = w.a[(p0+l)*w.lda+r]
			} else {
				pan[l*microM+r] = w.a[r*w.lda+p0+l]
			}
		}
	}
	return pan
}

// packB packs columns j0..j0+nb-1 of op(B), rows p0..p0+kb-1, into
// micro-panels of nr columns: bp[(jp·kb + l)·nr + c].
func (w *gemmArgs[T]) packB(bp []T, j0, nb, p0, kb int) {
	r := nr[T]()
	np := (nb + r - 1) / r
	for jp := range np {
		pan := bp[jp*kb*r : (jp+1)*kb*r]
		cols := min(r, nb-jp*r)
		jb := j0 + jp*r
		switch {
		case !w.tb && cols == r:
			packRows(pan, w.b[p0*w.ldb+jb:], kb, w.ldb)
		case cols == r:
			packColumns(pan, w.b[jb*w.ldb+p0:], kb, w.ldb)
		case !w.tb:
			for l := range kb {
				dst := pan[l*r : l*r+r]
				copy(dst, w.b[(p0+l)*w.ldb+jb:(p0+l)*w.ldb+jb+cols])
				clear(dst[cols:])
			}
		default:
			if cols < r {
				clear(pan)
			}
			for cc := range cols {
				for l, v := range w.b[(jb+cc)*w.ldb+p0 : (jb+cc)*w.ldb+p0+kb] {
					pan[l*r+cc] = v
				}
			}
		}
	}
}
