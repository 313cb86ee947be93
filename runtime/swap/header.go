package swap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"unsafe"

	"gorgonia.org/tensor"
)

// A swap file is a header, the payload (the distinct tensors' bytes, one
// after the other, in this machine's byte order) and a trailer:
//
//	magic      8 bytes  "PPGSWAP\n"
//	version    uint16   1
//	order      uint8    1: little-endian payload, 2: big-endian
//	reserved   uint8    0
//	headerLen  uint32   bytes of the whole header, checksum included
//	tier       8 bytes  the tier's random identity
//	id         uint64   the offload's number in its tier
//	tagLen     uint16   then the tag's bytes (at most maxTag)
//	tensors    uint32   then per tensor: dtype uint8 (1 float32, 2 float64),
//	                    rank uint8, rank × uint64 dimensions
//	payload    uint64   bytes of payload
//	headerCRC  uint32   CRC-32 (IEEE) of the header's bytes before it
//	... payload ...
//	payloadCRC uint32   CRC-32 of the payload
//
// The header's integers are little-endian. Loading checks all of it before
// the data is used: a file corrupted in place fails a checksum, a file of
// another chunk or another tier fails the identity (tier, id, tag, dtypes
// and shapes), a truncated one fails the length.
const (
	fileMagic   = "PPGSWAP\n"
	fileVersion = 1
	prefixLen   = 16 // magic, version, order, reserved, headerLen

	maxTag        = 1024    // bytes of a tag kept in the header
	maxTensors    = 1 << 16 // distinct tensors in one offload
	maxRank       = 32      // dimensions of one tensor
	maxHeaderLen  = prefixLen + 8 + 8 + 2 + maxTag + 4 + maxTensors*(2+maxRank*8) + 8 + 4
	trailerLen    = 4
	dtypeFloat32  = 1
	dtypeFloat64  = 2
	orderLittle   = 1
	orderBig      = 2
	minTensorSize = 2 // dtype and rank bytes
)

// crcTable is the checksum of headers and payloads: CRC-32 (IEEE), the
// fastest of those measured (Go 1.26 on an AMD EPYC: CRC-32 7 GB/s,
// CRC-32C 4.2 GB/s, SHA-256 1.3 GB/s); it makes a 16 MiB round trip through
// the page cache (BenchmarkTier/file) about 14 -> 20 ms. It detects
// accidents (a flipped byte, a truncated or stale file), not an attacker
// who can write the directory: such a one could as well write the process.
var crcTable = crc32.IEEETable

// nativeOrder is this machine's byte order, as the header records it.
var nativeOrder = func() uint8 {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) == 1 {
		return orderLittle
	}
	return orderBig
}()

// header is what a swap file says about its payload.
type header struct {
	order   uint8
	tier    [8]byte
	id      uint64
	tag     string
	metas   []meta
	payload int64
}

// keptTag is the part of a tag a header holds.
func keptTag(tag string) string {
	if len(tag) > maxTag {
		return tag[:maxTag]
	}
	return tag
}

// encodeHeader returns h's bytes, checksum included. The metas must be
// those of a plan (planOf bounds nothing but what the tensors hold, so the
// counts are checked here too).
func encodeHeader(h header) ([]byte, error) {
	if len(h.metas) > maxTensors {
		return nil, fmt.Errorf("%d distinct tensors in one offload; a swap file holds at most %d", len(h.metas), maxTensors)
	}
	tag := keptTag(h.tag)
	b := make([]byte, 0, 64+len(tag)+len(h.metas)*16)
	b = append(b, fileMagic...)
	b = binary.LittleEndian.AppendUint16(b, fileVersion)
	b = append(b, h.order, 0)
	b = binary.LittleEndian.AppendUint32(b, 0) // headerLen, set below
	b = append(b, h.tier[:]...)
	b = binary.LittleEndian.AppendUint64(b, h.id)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(tag)))
	b = append(b, tag...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h.metas)))
	for i, m := range h.metas {
		var dt byte
		switch m.dt {
		case tensor.Float32:
			dt = dtypeFloat32
		case tensor.Float64:
			dt = dtypeFloat64
		default:
			return nil, fmt.Errorf("tensor %d: dtype %v cannot be swapped", i, m.dt)
		}
		if len(m.shape) > maxRank {
			return nil, fmt.Errorf("tensor %d: %d dimensions; a swap file holds at most %d", i, len(m.shape), maxRank)
		}
		b = append(b, dt, byte(len(m.shape)))
		for _, d := range m.shape {
			b = binary.LittleEndian.AppendUint64(b, uint64(d))
		}
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(h.payload))
	binary.LittleEndian.PutUint32(b[12:], uint32(len(b)+4))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable)), nil
}

// headerLenOf checks a header's fixed prefix and returns the whole
// header's length, bounded by maxHeaderLen.
func headerLenOf(prefix []byte) (int, error) {
	if len(prefix) < prefixLen {
		return 0, fmt.Errorf("%d bytes: too short for a swap file header", len(prefix))
	}
	if string(prefix[:8]) != fileMagic {
		return 0, fmt.Errorf("not a ppgen swap file (magic %q, want %q)", prefix[:8], fileMagic)
	}
	if v := binary.LittleEndian.Uint16(prefix[8:]); v != fileVersion {
		return 0, fmt.Errorf("swap file version %d, want %d", v, fileVersion)
	}
	n := binary.LittleEndian.Uint32(prefix[12:])
	if n < prefixLen+8+8+2+4+8+4 || n > maxHeaderLen {
		return 0, fmt.Errorf("header length %d out of range", n)
	}
	return int(n), nil
}

// errHeader marks a header that is not well formed.
var errHeader = errors.New("malformed swap file header")

// decodeHeader parses a whole header (as long as headerLenOf says) and
// checks its checksum and every count against the bytes there are, before
// anything is allocated from them.
func decodeHeader(b []byte) (header, error) {
	var h header
	n, err := headerLenOf(b)
	if err != nil {
		return h, err
	}
	if len(b) != n {
		return h, fmt.Errorf("%w: %d bytes, the header says %d", errHeader, len(b), n)
	}
	body, sum := b[:n-4], binary.LittleEndian.Uint32(b[n-4:])
	if got := crc32.Checksum(body, crcTable); got != sum {
		return h, fmt.Errorf("header checksum mismatch: CRC-32 %08x, the header says %08x (the file was changed or corrupted)", got, sum)
	}
	h.order = b[10]
	if h.order != orderLittle && h.order != orderBig {
		return h, fmt.Errorf("%w: byte order %d", errHeader, h.order)
	}
	if b[11] != 0 {
		return h, fmt.Errorf("%w: reserved byte %d", errHeader, b[11])
	}
	r := body[prefixLen:]
	take := func(k int) ([]byte, bool) {
		if k < 0 || k > len(r) {
			return nil, false
		}
		x := r[:k]
		r = r[k:]
		return x, true
	}
	short := fmt.Errorf("%w: ends early", errHeader)
	x, ok := take(8 + 8 + 2)
	if !ok {
		return h, short
	}
	copy(h.tier[:], x)
	h.id = binary.LittleEndian.Uint64(x[8:])
	tagLen := int(binary.LittleEndian.Uint16(x[16:]))
	if tagLen > maxTag {
		return h, fmt.Errorf("%w: tag of %d bytes, at most %d", errHeader, tagLen, maxTag)
	}
	if x, ok = take(tagLen); !ok {
		return h, short
	}
	h.tag = string(x)
	if x, ok = take(4); !ok {
		return h, short
	}
	count := binary.LittleEndian.Uint32(x)
	if count > maxTensors || int(count)*minTensorSize > len(r) {
		return h, fmt.Errorf("%w: %d tensors in %d bytes", errHeader, count, len(r))
	}
	h.metas = make([]meta, count)
	var total int64
	for i := range h.metas {
		if x, ok = take(2); !ok {
			return h, short
		}
		var dt tensor.Dtype
		switch x[0] {
		case dtypeFloat32:
			dt = tensor.Float32
		case dtypeFloat64:
			dt = tensor.Float64
		default:
			return h, fmt.Errorf("%w: tensor %d: dtype code %d", errHeader, i, x[0])
		}
		rank := int(x[1])
		if rank < 1 || rank > maxRank {
			return h, fmt.Errorf("%w: tensor %d: %d dimensions, want 1..%d", errHeader, i, rank, maxRank)
		}
		if x, ok = take(rank * 8); !ok {
			return h, short
		}
		shape := make(tensor.Shape, rank)
		elems := int64(1)
		limit := int64(math.MaxInt64) / int64(dt.Size())
		for k := range shape {
			d := binary.LittleEndian.Uint64(x[8*k:])
			if d > uint64(limit) {
				return h, fmt.Errorf("%w: tensor %d: dimension %d is %d", errHeader, i, k, d)
			}
			shape[k] = int(d)
			if d != 0 && elems > limit/int64(d) {
				return h, fmt.Errorf("%w: tensor %d: shape %v overflows", errHeader, i, shape[:k+1])
			}
			elems *= int64(d)
		}
		if elems > int64(math.MaxInt) {
			return h, fmt.Errorf("%w: tensor %d: %d elements", errHeader, i, elems)
		}
		size := elems * int64(dt.Size())
		if total > math.MaxInt64-size {
			return h, fmt.Errorf("%w: the tensors' sizes overflow", errHeader)
		}
		total += size
		h.metas[i] = meta{dt: dt, shape: shape, n: int(elems)}
	}
	if x, ok = take(8); !ok {
		return h, short
	}
	payload := binary.LittleEndian.Uint64(x)
	if payload != uint64(total) {
		return h, fmt.Errorf("%w: payload of %d bytes, the tensors hold %d", errHeader, payload, total)
	}
	if len(r) != 0 {
		return h, fmt.Errorf("%w: %d bytes after the payload length", errHeader, len(r))
	}
	h.payload = total
	return h, nil
}
