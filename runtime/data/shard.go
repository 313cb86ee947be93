package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// chunkBytes bounds the buffer of every read: a window, a checksum pass
// and a write go through buffers of at most this many bytes.
const chunkBytes = 64 << 10

var chunks = sync.Pool{New: func() any { b := make([]byte, chunkBytes); return &b }}

// Shard is an open token shard. Its methods are safe for concurrent use
// (reads go through [os.File.ReadAt]).
type Shard struct {
	path string
	f    *os.File
	h    header
}

// ShardID names a shard's contents: its file name (without directory), its
// token count and its tokens' checksum. A [Position] records the IDs of the
// shards it was sampled from.
type ShardID struct {
	Name   string `json:"name"`
	Tokens int64  `json:"tokens"`
	CRC32C uint32 `json:"crc32c"`
}

// Open opens the shard at path, validates its header and size, and
// verifies its checksum and vocabulary by reading it once through a
// bounded buffer ([Shard.Verify]). Use OpenLazy to defer that pass.
func Open(path string) (*Shard, error) {
	s, err := OpenLazy(path)
	if err != nil {
		return nil, err
	}
	if err := s.Verify(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// OpenLazy opens the shard at path and validates its header (its own
// checksum included) and its size, reading 32 bytes. The tokens' checksum
// is not verified until [Shard.Verify] is called: a lazy reader trusts the
// body until then (a token out of the vocabulary is still refused by
// every read). Use it when the shards are many and large and a background
// Verify, or one done when they were copied, suffices.
func OpenLazy(path string) (*Shard, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data: %w", err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("data: shard %s: %w: not a regular file (%v)", path, ErrFormat, st.Mode().Type())
	}
	var b [HeaderSize]byte
	n, err := f.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, fmt.Errorf("data: shard %s: reading the header: %w", path, err)
	}
	h, err := decodeHeader(b[:n], st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data: shard %s: %w", path, err)
	}
	return &Shard{path: path, f: f, h: h}, nil
}

// Path returns the path the shard was opened at.
func (s *Shard) Path() string { return s.path }

// Len returns the number of tokens.
func (s *Shard) Len() int64 { return int64(s.h.count) }

// Width returns the tokens' width.
func (s *Shard) Width() Width { return s.h.width }

// Vocab returns the vocabulary size the header records (0: none).
func (s *Shard) Vocab() uint32 { return s.h.vocab }

// ID returns the shard's identity for a [Position].
func (s *Shard) ID() ShardID {
	return ShardID{Name: filepath.Base(s.path), Tokens: int64(s.h.count), CRC32C: s.h.crc}
}

// Close closes the file.
func (s *Shard) Close() error { return s.f.Close() }

// Verify reads the tokens once, 64 KiB at a time, and checks their
// CRC-32C against the header's and each token against the vocabulary.
func (s *Shard) Verify() error {
	bp := chunks.Get().(*[]byte)
	defer chunks.Put(bp)
	buf := *bp
	sum := uint32(0)
	total := int64(s.h.count) * int64(s.h.width)
	for off := int64(0); off < total; {
		n := int(min(int64(len(buf)), total-off))
		if _, err := s.f.ReadAt(buf[:n], HeaderSize+off); err != nil {
			return fmt.Errorf("data: shard %s: reading bytes %d..%d: %w", s.path, HeaderSize+off, HeaderSize+off+int64(n), err)
		}
		sum = crc32.Update(sum, castagnoli, buf[:n])
		if s.h.vocab != 0 {
			if i, tok, ok := s.outOfVocab(buf[:n]); ok {
				return fmt.Errorf("data: shard %s: %w: token %d at %d is not below the vocabulary %d", s.path, ErrFormat, tok, off/int64(s.h.width)+int64(i), s.h.vocab)
			}
		}
		off += int64(n)
	}
	if sum != s.h.crc {
		return fmt.Errorf("data: shard %s: %w: tokens' checksum %08x, the header says %08x", s.path, ErrFormat, sum, s.h.crc)
	}
	return nil
}

// outOfVocab returns the first token of b (whole tokens) at or above the
// vocabulary.
func (s *Shard) outOfVocab(b []byte) (i int, tok uint32, found bool) {
	w := int(s.h.width)
	for i = 0; i*w < len(b); i++ {
		if tok = s.token(b[i*w:]); tok >= s.h.vocab {
			return i, tok, true
		}
	}
	return 0, 0, false
}

func (s *Shard) token(b []byte) uint32 {
	if s.h.width == Uint16 {
		return uint32(binary.LittleEndian.Uint16(b))
	}
	return binary.LittleEndian.Uint32(b)
}

// ReadAt fills dst with the tokens at offsets off, off+1, …,
// off+len(dst)-1, reading through a 64 KiB buffer whatever len(dst) is.
// The window must lie inside the shard; a token at or above the recorded
// vocabulary is refused.
func (s *Shard) ReadAt(dst []uint32, off int64) error {
	if off < 0 || off > int64(s.h.count) || int64(len(dst)) > int64(s.h.count)-off {
		return fmt.Errorf("data: shard %s: window of %d tokens at offset %d is outside its %d tokens", s.path, len(dst), off, s.h.count)
	}
	bp := chunks.Get().(*[]byte)
	defer chunks.Put(bp)
	buf := *bp
	w := int(s.h.width)
	per := len(buf) / w
	for done := 0; done < len(dst); {
		n := min(per, len(dst)-done)
		b := buf[:n*w]
		at := HeaderSize + (off+int64(done))*int64(w)
		if _, err := s.f.ReadAt(b, at); err != nil {
			return fmt.Errorf("data: shard %s: reading %d tokens at offset %d: %w", s.path, n, off+int64(done), err)
		}
		out := dst[done : done+n]
		decode(out, b, s.h.width)
		if s.h.vocab != 0 {
			for i, t := range out {
				if t >= s.h.vocab {
					return fmt.Errorf("data: shard %s: %w: token %d at %d is not below the vocabulary %d", s.path, ErrFormat, t, off+int64(done+i), s.h.vocab)
				}
			}
		}
		done += n
	}
	return nil
}

// decode sets out to the len(out) tokens of width w in b.
func decode(out []uint32, b []byte, w Width) {
	if w == Uint16 {
		b = b[:2*len(out)]
		i := 0
		for ; i+4 <= len(out); i += 4 { // four tokens a load
			v := binary.LittleEndian.Uint64(b[2*i : 2*i+8])
			o := out[i : i+4 : i+4]
			o[0], o[1], o[2], o[3] = uint32(v&0xffff), uint32(v>>16&0xffff), uint32(v>>32&0xffff), uint32(v>>48)
		}
		for ; i < len(out); i++ {
			out[i] = uint32(b[2*i]) | uint32(b[2*i+1])<<8
		}
		return
	}
	b = b[:4*len(out)]
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i : 4*i+4])
	}
}
