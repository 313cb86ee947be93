package checkpoint

import (
	"errors"
	"hash/crc32"
	"io"
)

// fileReader reads a shard file for decode: the small fields in order
// through a buffer of ioBuffer bytes, and a large field (a tensor's
// elements) straight into its destination, several crcChunk pieces at
// once at their offsets in the file, each checksummed by the goroutine
// that read it (readChecksummed, crcPieces). No byte is copied twice but
// the ones the buffer already held.
type fileReader struct {
	f         io.ReaderAt
	off       int64 // the file offset just past what buf holds
	buf       []byte
	next, end int // buf[next:end] is read from the file, not yet used
}

func newFileReader(f io.ReaderAt) *fileReader {
	return &fileReader{f: f, buf: make([]byte, ioBuffer)}
}

// Read is io.Reader's, through the buffer.
func (r *fileReader) Read(p []byte) (int, error) {
	if r.next == r.end {
		n, err := r.f.ReadAt(r.buf, r.off)
		r.off += int64(n)
		r.next, r.end = 0, n
		if n == 0 {
			if err == nil {
				err = io.EOF
			}
			return 0, err
		}
	}
	n := copy(p, r.buf[r.next:r.end])
	r.next += n
	return n, nil
}

// readChecksummed fills p with the next len(p) bytes and returns crc
// extended by them: what the buffer holds first, then the rest in
// pieces (crcPieces).
func (r *fileReader) readChecksummed(crc uint32, p []byte) (uint32, error) {
	n := copy(p, r.buf[r.next:r.end])
	r.next += n
	crc = crc32.Update(crc, castagnoli, p[:n])
	rest, base := p[n:], r.off
	whole := len(rest) / crcChunk * crcChunk
	crc, err := crcPieces(crc, rest[:whole], func(piece []byte, at int) error { return r.readAt(piece, base+int64(at)) })
	if err != nil {
		return crc, err
	}
	// The tail, shorter than a piece, is summed here in order: joining
	// a short piece's CRC costs more than summing it.
	if tail := rest[whole:]; len(tail) > 0 {
		if err := r.readAt(tail, base+int64(whole)); err != nil {
			return crc, err
		}
		crc = crc32.Update(crc, castagnoli, tail)
	}
	r.off += int64(len(rest))
	return crc, nil
}

// readAt fills p from the file at off.
func (r *fileReader) readAt(p []byte, off int64) error {
	k, err := r.f.ReadAt(p, off)
	if k == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return corrupt("truncated")
	}
	return err
}
