package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The shard format, version 1 (docs/data.md). Every integer is
// little-endian.
//
//	offset size field
//	     0    8 magic "PPGENTOK"
//	     8    2 version (1)
//	    10    2 token width in bytes: 2 (uint16) or 4 (uint32)
//	    12    4 vocabulary size: every token is below it (0: not recorded)
//	    16    8 token count
//	    24    4 CRC-32C (Castagnoli) of the token bytes
//	    28    4 CRC-32C of header bytes 0..27
//	    32      the tokens: count × width bytes
//
// The file holds exactly HeaderSize + count·width bytes.
const (
	Magic      = "PPGENTOK"
	Version    = 1
	HeaderSize = 32
)

// Width is a token's size in bytes: Uint16 or Uint32.
type Width uint16

const (
	Uint16 Width = 2
	Uint32 Width = 4
)

func (w Width) valid() bool { return w == Uint16 || w == Uint32 }

// max is the largest token of width w.
func (w Width) max() uint64 {
	if w == Uint16 {
		return 1<<16 - 1
	}
	return 1<<32 - 1
}

func (w Width) String() string {
	switch w {
	case Uint16:
		return "uint16"
	case Uint32:
		return "uint32"
	}
	return fmt.Sprintf("width %d", uint16(w))
}

// ErrFormat is wrapped by every error that refuses a shard's bytes (header,
// size, checksum, a token out of the vocabulary).
var ErrFormat = errors.New("not a valid token shard")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is a shard's header, decoded.
type header struct {
	width Width
	vocab uint32
	count uint64
	crc   uint32 // of the token bytes
}

// encode returns h's 32 bytes, its own checksum included.
func (h header) encode() [HeaderSize]byte {
	var b [HeaderSize]byte
	copy(b[:8], Magic)
	binary.LittleEndian.PutUint16(b[8:], Version)
	binary.LittleEndian.PutUint16(b[10:], uint16(h.width))
	binary.LittleEndian.PutUint32(b[12:], h.vocab)
	binary.LittleEndian.PutUint64(b[16:], h.count)
	binary.LittleEndian.PutUint32(b[24:], h.crc)
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
	return b
}

// decodeHeader checks b's fields in order (magic, version, width, header
// checksum, count against size) before any is used to size anything; size
// is the file's size in bytes.
func decodeHeader(b []byte, size int64) (header, error) {
	if len(b) < HeaderSize {
		return header{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrFormat, len(b), HeaderSize)
	}
	if string(b[:8]) != Magic {
		return header{}, fmt.Errorf("%w: magic %q, want %q", ErrFormat, b[:8], Magic)
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != Version {
		return header{}, fmt.Errorf("%w: format version %d, this reader knows %d", ErrFormat, v, Version)
	}
	h := header{
		width: Width(binary.LittleEndian.Uint16(b[10:])),
		vocab: binary.LittleEndian.Uint32(b[12:]),
		count: binary.LittleEndian.Uint64(b[16:]),
		crc:   binary.LittleEndian.Uint32(b[24:]),
	}
	if !h.width.valid() {
		return header{}, fmt.Errorf("%w: token width %d bytes, want 2 (uint16) or 4 (uint32)", ErrFormat, uint16(h.width))
	}
	if got, want := crc32.Checksum(b[:28], castagnoli), binary.LittleEndian.Uint32(b[28:]); got != want {
		return header{}, fmt.Errorf("%w: header checksum %08x, the header's bytes give %08x", ErrFormat, want, got)
	}
	if h.vocab != 0 && uint64(h.vocab) > h.width.max()+1 {
		return header{}, fmt.Errorf("%w: vocabulary %d does not fit %s tokens", ErrFormat, h.vocab, h.width)
	}
	maxCount := uint64(1<<63-1-HeaderSize) / uint64(h.width)
	if h.count > maxCount {
		return header{}, fmt.Errorf("%w: token count %d overflows a file size (at most %d %s tokens)", ErrFormat, h.count, maxCount, h.width)
	}
	if want := HeaderSize + int64(h.count)*int64(h.width); size != want {
		return header{}, fmt.Errorf("%w: file size %d bytes, the header's %d %s tokens need %d", ErrFormat, size, h.count, h.width, want)
	}
	return h, nil
}
