package checkpoint

import (
	"hash/crc32"
	"runtime"
	"sync"
	"sync/atomic"
)

// crcChunk is the piece of a large read or write that one goroutine
// moves and checksums (crcPieces, crcOverlapped): small enough that the
// piece is still in the caches when it is summed (a 64 MiB checksum from
// memory runs 3–7× slower than one from the caches: BenchmarkCRC), and
// that a 4 MiB tensor spreads over the cores.
const crcChunk = 256 << 10

// ioBuffer is the buffer of a shard's reader and writer, for the small
// fields: a tensor's elements pass it, read straight into the tensor or
// written from it, but for the part the buffer already holds, which is
// copied twice (so it is small: smaller than a piece, so that every piece
// after a tensor's first goes past it).
const ioBuffer = 64 << 10

// chunkShift advances a CRC-32C over crcChunk zero bytes (gf2Times): the
// operator crc32Combine builds, made once for the pieces joinPieces joins.
var chunkShift = sync.OnceValue(func() *[32]uint32 { return zerosOperator(crcChunk) })

// zerosOperator returns the matrix that advances a CRC-32C over n zero
// bytes: column i is basis vector i advanced (crc32Combine is linear in
// its first argument).
func zerosOperator(n int64) *[32]uint32 {
	var op [32]uint32
	for i := range op {
		op[i] = crc32Combine(1<<i, 0, n)
	}
	return &op
}

// crcOverlapped runs do on p's pieces in order, while worker goroutines
// checksum the pieces done, and returns crc extended by p: a load or save
// takes about as long as its reads or writes, not their sum with the
// checksum. Pieces are checksummed apart and joined with crc32Combine.
func crcOverlapped(crc uint32, p []byte, do func([]byte) error) (uint32, error) {
	piece := func(i int) []byte { return p[i*crcChunk : min((i+1)*crcChunk, len(p))] }
	n := (len(p) + crcChunk - 1) / crcChunk
	sums := make([]uint32, n)
	jobs := make(chan int, n)
	var wg sync.WaitGroup
	for range max(1, min(runtime.GOMAXPROCS(0), 8)) { // the reader waits in the kernel's copy
		wg.Go(func() {
			for i := range jobs {
				sums[i] = crc32.Checksum(piece(i), castagnoli)
			}
		})
	}
	var err error
	for i := 0; i < n && err == nil; i++ {
		if err = do(piece(i)); err == nil {
			jobs <- i
		}
	}
	close(jobs)
	wg.Wait()
	if err != nil {
		return crc, err
	}
	return joinPieces(crc, sums, len(p)), nil
}

// crc32Combine returns the CRC-32C of A followed by B from crc1, A's, and
// crc2, B's of len2 bytes (zlib's crc32_combine: crc1 advanced over len2
// zero bytes by squaring the operator of one zero bit, then xor crc2).
func crc32Combine(crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1
	}
	var even, odd [32]uint32
	odd[0] = crc32.Castagnoli // the reflected polynomial: one zero bit
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // two zero bits
	gf2Square(&odd, &even) // four
	for {
		gf2Square(&even, &odd)
		if len2&1 != 0 {
			crc1 = gf2Times(&even, crc1)
		}
		if len2 >>= 1; len2 == 0 {
			break
		}
		gf2Square(&odd, &even)
		if len2&1 != 0 {
			crc1 = gf2Times(&odd, crc1)
		}
		if len2 >>= 1; len2 == 0 {
			break
		}
	}
	return crc1 ^ crc2
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := range 32 {
		square[n] = gf2Times(mat, mat[n])
	}
}

// crcPieces runs do on p's crcChunk pieces (each with its offset in p),
// several at once — the caller and up to GOMAXPROCS-1 more goroutines,
// at most 4 in all — and returns crc extended by p. Each goroutine sums
// a piece while it is in its own core's cache: after do when do reads
// into it (a load, fileReader.readChecksummed), before when sumFirst and
// do writes it out (a save, fileWriter.writeChecksummed), so that the
// sum brings the piece into the cache that do's copy then reads. Summed
// so, the checksum costs a fifth of a copy from or to the page cache,
// and the pieces spread over the cores. On the first error it stops
// handing out pieces and returns that error.
func crcPieces(crc uint32, p []byte, sumFirst bool, do func(piece []byte, at int) error) (uint32, error) {
	n := (len(p) + crcChunk - 1) / crcChunk
	piece := func(i int) []byte { return p[i*crcChunk : min((i+1)*crcChunk, len(p))] }
	sums := make([]uint32, n)
	var next atomic.Int64
	var failed atomic.Bool
	var once sync.Once
	var firstErr error
	work := func() {
		for !failed.Load() {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			b := piece(i)
			if sumFirst {
				sums[i] = crc32.Checksum(b, castagnoli)
			}
			if err := do(b, i*crcChunk); err != nil {
				once.Do(func() { firstErr = err })
				failed.Store(true)
				return
			}
			if !sumFirst {
				sums[i] = crc32.Checksum(b, castagnoli)
			}
		}
	}
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), 4, n) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	if firstErr != nil {
		return crc, firstErr
	}
	return joinPieces(crc, sums, len(p)), nil
}

// joinPieces returns crc extended by the bytes whose crcChunk pieces
// (the last one shorter when total is not a multiple) have the CRC-32Cs
// sums.
func joinPieces(crc uint32, sums []uint32, total int) uint32 {
	shift := chunkShift()
	for i, s := range sums {
		if k := min(crcChunk, total-i*crcChunk); k == crcChunk {
			crc = gf2Times(shift, crc) ^ s
		} else {
			crc = crc32Combine(crc, s, int64(k))
		}
	}
	return crc
}
