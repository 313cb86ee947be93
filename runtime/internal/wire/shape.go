package wire

import (
	"fmt"
	"math/bits"

	"github.com/ppgen/ppgen/abi"
)

// Shape validates the dtype and shape of a message a peer announced (a TCP
// frame's header, an MPI header, an NCCL control header) before anything
// is allocated: dt a known code, at most MaxDims dims, and every product
// overflow-checked. The payload is the element size times the product of
// the dims; a zero dimension makes it empty, but the other dimensions
// still size strides, so the product of the non-zero ones must fit
// maxBytes too. setting names what sets maxBytes, for the message. Errors
// wrap ErrProtocol or ErrFrameTooLarge and read as what the peer "sent".
func Shape(dt uint8, dims []uint64, maxBytes int64, setting string) (shape []int, payload int64, err error) {
	es := ElemSize(dt)
	if es == 0 {
		return nil, 0, fmt.Errorf("%w: sent a tensor of unknown dtype %d", ErrProtocol, dt)
	}
	if len(dims) > MaxDims {
		return nil, 0, fmt.Errorf("%w: sent a shape of %d dimensions, at most %d", ErrProtocol, len(dims), MaxDims)
	}
	limit := uint64(max(maxBytes, 0))
	shape = make([]int, len(dims))
	nonzero, zero := uint64(es), false
	for i, d := range dims {
		if d == 0 {
			zero = true
			continue
		}
		hi, lo := bits.Mul64(nonzero, d)
		if hi != 0 || lo > 1<<62 {
			return nil, 0, fmt.Errorf("%w: sent a tensor whose shape overflows (dimension %d is %d; the elements would take over 2^62 bytes), over this rank's cap of %d bytes (%s)", ErrFrameTooLarge, i, d, maxBytes, setting)
		}
		nonzero = lo
		shape[i] = int(d)
	}
	switch {
	case zero && nonzero > limit:
		return nil, 0, fmt.Errorf("%w: sent an empty tensor whose other dimensions %v span over this rank's cap of %d bytes (%s)", ErrFrameTooLarge, shape, maxBytes, setting)
	case zero:
		return shape, 0, nil
	case nonzero > limit:
		return nil, 0, fmt.Errorf("%w: sent a tensor of shape %v, %d bytes, over this rank's cap of %d bytes (%s)", ErrFrameTooLarge, shape, nonzero, maxBytes, setting)
	}
	return shape, int64(nonzero), nil
}

// Channels is the number of channels a message travels on: abi's
// ActChannel, GradChannel and DataChannel.
const Channels = 3

// ChannelSlots sizes an array indexed by an abi.Channel (slot 0,
// abi.NoChannel, unused).
const ChannelSlots = int(abi.DataChannel) + 1

// ValidChannel reports whether ch is one a message travels on.
func ValidChannel(ch abi.Channel) bool { return ch >= abi.ActChannel && ch <= abi.DataChannel }

// ChannelCode is ch's value on the wire: 0 act, 1 grad, 2 data (a TCP
// frame's channel byte, ppgen-tcp/3; the channel of an MPI tag; an NCCL
// control header's), abi's value less one. ch must be valid.
func ChannelCode(ch abi.Channel) uint8 { return uint8(ch) - 1 }

// ChannelOf is the channel of wire code c; false for an unknown code.
func ChannelOf(c uint8) (abi.Channel, bool) {
	if c >= Channels {
		return abi.NoChannel, false
	}
	return abi.Channel(c) + 1, true
}
