package transport

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// A frame on a peer connection is a 24-byte fixed header, for data frames
// followed by one little-endian uint64 per dimension, then the payload:
//
//	0  kind      uint8  (frameData, frameHeartbeat, ...)
//	1  channel   uint8  (data), sentinel code (abort)
//	2  dtype     uint8  (data)
//	3  dims      uint8  number of dimensions (data), 0 otherwise
//	4  tag.Stage int32  (data), rank at fault (abort)
//	8  tag.Micro int32  (data), observing rank or -1 (abort)
//	12 magic     uint32 frameMagic
//	16 length    uint64 payload bytes
//
// decodeHeader checks every field before the reader allocates anything.

// frameLimits are the receiving rank's bounds on a frame.
type frameLimits struct {
	maxFrame int64 // TCPConfig.MaxFrameBytes: header, dims and payload together
}

// frameHeader is a decoded and validated frame header.
type frameHeader struct {
	kind, dt uint8
	ch       Channel // data frames; the sentinel code of abort frames
	tag      Tag
	dims     []int  // data frames
	n        uint64 // payload bytes
	size     int64  // whole frame: header, dims and payload
}

// headerBytes is the length of a header with nd dimensions.
func headerBytes(nd int) int { return frameHdrLen + 8*nd }

// dimsOf returns how many dimension words follow the fixed header b (at
// least frameHdrLen bytes) of a data frame, or 0 when none should be read
// (other kinds, or a count over maxDims that decodeHeader will refuse).
func dimsOf(b []byte) int {
	if b[0] != frameData || int(b[3]) > maxDims {
		return 0
	}
	return int(b[3])
}

// decodeHeader decodes and validates the header b of one frame: the fixed
// header followed, for a data frame, by its dims. Every size is computed
// with overflow checks; a header that passes describes a frame whose total
// size is at most lim.maxFrame and whose payload is exactly the dtype's
// element size times the product of the dims. Errors wrap ErrProtocol or
// ErrFrameTooLarge and read as what the peer "sent".
func decodeHeader(b []byte, lim frameLimits) (frameHeader, error) {
	var h frameHeader
	if len(b) < frameHdrLen {
		return h, fmt.Errorf("%w: sent a truncated frame header (%d bytes, want %d)", ErrProtocol, len(b), frameHdrLen)
	}
	if m := binary.LittleEndian.Uint32(b[12:]); m != frameMagic {
		return h, fmt.Errorf("%w: sent a corrupt frame (bad magic %#08x)", ErrProtocol, m)
	}
	h.kind, h.ch, h.dt = b[0], Channel(b[1]), b[2]
	nd := int(b[3])
	h.tag = Tag{Stage: int32(binary.LittleEndian.Uint32(b[4:])), Micro: int32(binary.LittleEndian.Uint32(b[8:]))}
	h.n = binary.LittleEndian.Uint64(b[16:])
	switch h.kind {
	case frameHeartbeat, frameGoodbye, frameByeAck:
		if nd != 0 || h.n != 0 || len(b) != frameHdrLen {
			return h, fmt.Errorf("%w: sent a malformed control frame (kind %d, %d dims, %d payload bytes)", ErrProtocol, h.kind, nd, h.n)
		}
		h.size = frameHdrLen
		return h, nil
	case frameAbort:
		if nd != 0 || len(b) != frameHdrLen {
			return h, fmt.Errorf("%w: sent a malformed abort frame (%d dims)", ErrProtocol, nd)
		}
		if h.n > maxAbortMsgLen {
			return h, fmt.Errorf("%w: sent an abort frame with a %d-byte reason, over the %d-byte limit", ErrProtocol, h.n, maxAbortMsgLen)
		}
		h.size = frameHdrLen + int64(h.n)
		return h, nil
	case frameData:
	default:
		return h, fmt.Errorf("%w: sent a frame of unknown kind %d", ErrProtocol, h.kind)
	}
	es := elemSize(h.dt)
	if h.ch >= NumChannels || es == 0 || nd > maxDims {
		return h, fmt.Errorf("%w: sent a malformed frame (channel %d, dtype %d, %d dims; at most %d)", ErrProtocol, uint8(h.ch), h.dt, nd, maxDims)
	}
	if len(b) != headerBytes(nd) {
		return h, fmt.Errorf("%w: sent a truncated frame header (%d bytes for %d dims, want %d)", ErrProtocol, len(b), nd, headerBytes(nd))
	}
	// The payload is es × ∏dims bytes. A zero dimension makes it empty, but
	// the other dimensions still size strides, so the product of the
	// non-zero ones is bounded by maxFrame too. Every product is checked
	// for overflow, and stays under 2^62 (so the sum below cannot wrap).
	maxFrame := uint64(max(lim.maxFrame, 0))
	h.dims = make([]int, nd)
	nonzero, zero := uint64(es), false
	for i := range nd {
		d := binary.LittleEndian.Uint64(b[frameHdrLen+8*i:])
		if d == 0 {
			zero = true
			continue
		}
		hi, lo := bits.Mul64(nonzero, d)
		if hi != 0 || lo > 1<<62 {
			return h, fmt.Errorf("%w: sent a frame whose shape overflows (dimension %d is %d; the elements would take over 2^62 bytes), over this rank's cap of %d bytes (MaxFrameBytes)",
				ErrFrameTooLarge, i, d, lim.maxFrame)
		}
		nonzero = lo
		h.dims[i] = int(d)
	}
	if zero && nonzero > maxFrame {
		return h, fmt.Errorf("%w: sent an empty frame whose other dimensions %v span over this rank's cap of %d bytes (MaxFrameBytes)", ErrFrameTooLarge, h.dims, lim.maxFrame)
	}
	payload := nonzero
	if zero {
		payload = 0
	}
	size := uint64(headerBytes(nd)) + payload
	if size > maxFrame {
		return h, fmt.Errorf("%w: sent a frame of %d bytes, over this rank's cap of %d bytes (MaxFrameBytes)", ErrFrameTooLarge, size, lim.maxFrame)
	}
	if payload != h.n {
		return h, fmt.Errorf("%w: sent a malformed frame (payload of %d bytes for dims %v of %d-byte elements, want %d)", ErrProtocol, h.n, h.dims, es, payload)
	}
	h.size = int64(size)
	return h, nil
}

// putHeader writes the fixed header of a frame with nd = (len(h) -
// frameHdrLen) / 8 dims and an n-byte payload into h.
func putHeader(h []byte, kind, ch, dt uint8, tag Tag, n uint64) {
	h[0], h[1], h[2], h[3] = kind, ch, dt, uint8((len(h)-frameHdrLen)/8)
	binary.LittleEndian.PutUint32(h[4:], uint32(tag.Stage))
	binary.LittleEndian.PutUint32(h[8:], uint32(tag.Micro))
	binary.LittleEndian.PutUint32(h[12:], frameMagic)
	binary.LittleEndian.PutUint64(h[16:], n)
}
