package transport

import (
	"encoding/binary"
	"fmt"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
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
	code     uint8       // byte 1: the channel's wire code (data), the sentinel code (abort)
	ch       abi.Channel // data frames: the channel of code
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
	if b[0] != frameData || int(b[3]) > wire.MaxDims {
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
	h.kind, h.code, h.dt = b[0], b[1], b[2]
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
	ch, ok := wire.ChannelOf(h.code)
	if !ok || nd > wire.MaxDims {
		return h, fmt.Errorf("%w: sent a malformed frame (channel %d, %d dims; at most %d)", ErrProtocol, h.code, nd, wire.MaxDims)
	}
	h.ch = ch
	if len(b) != headerBytes(nd) {
		return h, fmt.Errorf("%w: sent a truncated frame header (%d bytes for %d dims, want %d)", ErrProtocol, len(b), nd, headerBytes(nd))
	}
	var buf [wire.MaxDims]uint64
	dims := buf[:nd]
	for i := range dims {
		dims[i] = binary.LittleEndian.Uint64(b[frameHdrLen+8*i:])
	}
	var payload int64
	var err error
	if h.dims, payload, err = wire.Shape(h.dt, dims, lim.maxFrame, "MaxFrameBytes"); err != nil {
		return h, err
	}
	size := uint64(headerBytes(nd)) + uint64(payload)
	if size > uint64(max(lim.maxFrame, 0)) {
		return h, fmt.Errorf("%w: sent a frame of %d bytes, over this rank's cap of %d bytes (MaxFrameBytes)", ErrFrameTooLarge, size, lim.maxFrame)
	}
	if uint64(payload) != h.n {
		return h, fmt.Errorf("%w: sent a malformed frame (payload of %d bytes for dims %v of %d-byte elements, want %d)", ErrProtocol, h.n, h.dims, wire.ElemSize(h.dt), payload)
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
