package data

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// Writer writes one shard atomically: the tokens go to a temporary file in
// the destination's directory, and [Writer.Close] writes the header,
// fsyncs the file, renames it over path and fsyncs the directory. Until
// Close returns nil, path holds whatever it held before (nothing, or the
// previous shard); a crash leaves at most a temporary file named
// path.tmp-*, which no reader opens and which can be deleted
// ([Writer.Abort] deletes it when the writer is still running).
type Writer struct {
	path string
	f    *os.File
	h    header
	buf  []byte
	err  error // the first error: Write and Close return it again
}

// Create starts a shard at path of tokens of width w whose values are all
// below vocab (0: no bound recorded, each token must only fit w).
func Create(path string, w Width, vocab uint32) (*Writer, error) {
	if !w.valid() {
		return nil, fmt.Errorf("data: shard %s: token width %d bytes, want 2 (uint16) or 4 (uint32)", path, uint16(w))
	}
	if uint64(vocab) > w.max()+1 {
		return nil, fmt.Errorf("data: shard %s: vocabulary %d does not fit %s tokens", path, vocab, w)
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	wr := &Writer{path: path, f: f, h: header{width: w, vocab: vocab}, buf: make([]byte, chunkBytes)}
	if _, err := f.Write(make([]byte, HeaderSize)); err != nil { // the header's place, written by Close
		wr.Abort()
		return nil, fmt.Errorf("data: shard %s: %w", path, err)
	}
	return wr, nil
}

// Write appends tokens. A token that does not fit the width or is not
// below the vocabulary fails the shard: Close then refuses to publish it.
func (w *Writer) Write(tokens []uint32) error {
	if w.err != nil {
		return w.err
	}
	width := int(w.h.width)
	limit := w.h.width.max()
	if w.h.vocab != 0 {
		limit = uint64(w.h.vocab) - 1
	}
	for len(tokens) > 0 {
		n := min(len(tokens), len(w.buf)/width)
		for i, t := range tokens[:n] {
			if uint64(t) > limit {
				w.err = fmt.Errorf("data: shard %s: token %d at %d does not fit (%s, vocabulary %d)", w.path, t, w.h.count+uint64(i), w.h.width, w.h.vocab)
				return w.err
			}
			if width == 2 {
				binary.LittleEndian.PutUint16(w.buf[2*i:], uint16(t))
			} else {
				binary.LittleEndian.PutUint32(w.buf[4*i:], t)
			}
		}
		b := w.buf[:n*width]
		if _, err := w.f.Write(b); err != nil {
			w.err = fmt.Errorf("data: shard %s: %w", w.path, err)
			return w.err
		}
		w.h.crc = crc32.Update(w.h.crc, castagnoli, b)
		w.h.count += uint64(n)
		tokens = tokens[n:]
	}
	return nil
}

// Close publishes the shard: header, fsync, rename, fsync of the
// directory. On any error (its own or an earlier Write's) it removes the
// temporary file and leaves path as it was.
func (w *Writer) Close() error {
	if w.f == nil {
		return fmt.Errorf("data: shard %s: already closed", w.path)
	}
	if w.err != nil {
		w.Abort()
		return w.err
	}
	h := w.h.encode()
	tmp := w.f.Name()
	err := func() error {
		if _, err := w.f.WriteAt(h[:], 0); err != nil {
			return err
		}
		if err := w.f.Chmod(0o644); err != nil {
			return err
		}
		if err := w.f.Sync(); err != nil {
			return err
		}
		if err := w.f.Close(); err != nil {
			return err
		}
		w.f = nil
		if err := os.Rename(tmp, w.path); err != nil {
			return err
		}
		return syncDir(filepath.Dir(w.path))
	}()
	if err != nil {
		w.err = fmt.Errorf("data: shard %s: publishing: %w", w.path, err)
		w.Abort()
		os.Remove(tmp)
		return w.err
	}
	return nil
}

// Abort drops the shard: it closes and removes the temporary file. It is
// safe after Close.
func (w *Writer) Abort() {
	if w.f == nil {
		return
	}
	name := w.f.Name()
	w.f.Close()
	os.Remove(name)
	w.f = nil
}

// syncDir fsyncs a directory so that a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
