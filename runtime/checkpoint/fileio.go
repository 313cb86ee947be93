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
	crc, err := crcPieces(crc, rest[:whole], false, func(piece []byte, at int) error { return r.readAt(piece, base+int64(at)) })
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

// fileWriter writes a shard file for Encode: the small fields through a
// buffer of ioBuffer bytes, and a large field straight from its memory,
// several crcChunk pieces at once at their offsets in the file, each
// checksummed by the goroutine that writes it, just before
// (writeChecksummed, crcPieces).
type fileWriter struct {
	f   io.WriterAt
	off int64 // the file offset of buf[0]
	buf []byte
	n   int // buf[:n] waits to be written
}

func newFileWriter(f io.WriterAt) *fileWriter {
	return &fileWriter{f: f, buf: make([]byte, ioBuffer)}
}

// Write is io.Writer's, through the buffer.
func (w *fileWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if w.n == len(w.buf) {
			if err := w.Flush(); err != nil {
				return total - len(p), err
			}
		}
		k := copy(w.buf[w.n:], p)
		w.n += k
		p = p[k:]
	}
	return total, nil
}

// Flush writes what the buffer holds.
func (w *fileWriter) Flush() error {
	if w.n == 0 {
		return nil
	}
	if _, err := w.f.WriteAt(w.buf[:w.n], w.off); err != nil {
		return err
	}
	w.off += int64(w.n)
	w.n = 0
	return nil
}

// writeChecksummed writes p after what was written and returns crc
// extended by it: its whole pieces at once (crcPieces), the tail through
// the buffer.
func (w *fileWriter) writeChecksummed(crc uint32, p []byte) (uint32, error) {
	if err := w.Flush(); err != nil {
		return crc, err
	}
	whole, base := len(p)/crcChunk*crcChunk, w.off
	crc, err := crcPieces(crc, p[:whole], true, func(piece []byte, at int) error {
		_, err := w.f.WriteAt(piece, base+int64(at))
		return err
	})
	if err != nil {
		return crc, err
	}
	w.off += int64(whole)
	tail := p[whole:]
	crc = crc32.Update(crc, castagnoli, tail)
	_, err = w.Write(tail)
	return crc, err
}
