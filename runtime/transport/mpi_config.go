package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"time"
)

// ErrNoMPI is returned by [NewMPI] in a build without the mpi tag.
var ErrNoMPI = errors.New("ppgen built without MPI: rebuild with -tags mpi (needs libopenmpi-dev or an MPICH)")

// MPIConfig configures [NewMPI]. Zero values take the defaults. The rank
// and world size come from MPI (MPI_COMM_WORLD), not from the
// configuration.
type MPIConfig struct {
	// Sync makes every send synchronous (MPI_Issend): Send returns only
	// once the peer's matching receive has started, which is the strict
	// rendezvous semantics ppgen's verifier proves schedules safe under. A
	// schedule that relies on buffering then fails with a *ProgressError
	// after Timeout instead of hanging. Without Sync, Send copies the
	// tensor, starts a nonblocking send (MPI_Isend) and returns at once.
	Sync bool
	// Timeout bounds every wait (a send's completion, a receive's arrival,
	// the start-up checks, Close's barrier): one that makes no progress for
	// this long fails with a *ProgressError naming this rank, the peer, the
	// channel and the last message received there. PPGEN_TIMEOUT sets it
	// (runtime/launch). Default DefaultTimeout.
	Timeout time.Duration
	// Fingerprint identifies the schedule. NewMPI compares a hash of it
	// across all ranks (an allgather) and refuses to start, on every rank,
	// naming the ranks that differ.
	Fingerprint string
	// Schedule describes the schedule for people, e.g. pipe.Spec's
	// Describe ("zbv (P=4, V=2, M=8)"): the refusal names what each group of
	// ranks runs. Only messages use it; the fingerprint decides. At most
	// MaxScheduleLen bytes of printable text.
	Schedule string
	// MaxMessageBytes caps one message's payload in both directions.
	// Default DefaultMaxFrameBytes (1 GiB); at most MaxMPIMessageBytes (an
	// MPI count is a C int).
	MaxMessageBytes int64
	// AbortLinger is how long Abort waits, after telling every peer why
	// this rank aborts, before it calls MPI_Abort: peers that are waiting
	// on this rank log their own failed step in that time. Default 300 ms.
	AbortLinger time.Duration
	// Logger receives the abort cause and warnings. Default slog.Default().
	Logger *slog.Logger
}

// MaxMPIMessageBytes bounds MPIConfig.MaxMessageBytes: MPI counts bytes in
// a C int.
const MaxMPIMessageBytes = 1<<31 - 1

const defaultMPIAbortLinger = 300 * time.Millisecond

func (c *MPIConfig) fill() error {
	orDefault(&c.Timeout, DefaultTimeout)
	orDefault(&c.AbortLinger, defaultMPIAbortLinger)
	orDefault(&c.MaxMessageBytes, DefaultMaxFrameBytes)
	if c.MaxMessageBytes > MaxMPIMessageBytes {
		return fmt.Errorf("MaxMessageBytes %d over %d (MPI counts bytes in a C int)", c.MaxMessageBytes, int64(MaxMPIMessageBytes))
	}
	if len(c.Schedule) > MaxScheduleLen || !printable(c.Schedule) {
		return fmt.Errorf("Schedule %.80q: want at most %d bytes of printable text (pipe.Spec's Describe)", c.Schedule, MaxScheduleLen)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// The MPI transport sends each message as two MPI messages on the same
// communicator: a fixed-size header, then the payload (the tensor's raw
// native-order bytes), each on its own MPI tag:
//
//	tag = 2*channel + part    part 0: header, part 1: payload
//
// MPI does not let messages of one (source, tag, communicator) overtake
// each other, so headers and payloads each arrive in send order per (peer,
// channel), and the k-th payload belongs to the k-th header. The header
// tells the receiver the dtype and shape, hence the payload's exact size,
// before it posts the payload's receive straight into the new tensor.
//
// The header (mpiHeaderLen bytes, little-endian):
//
//	0   magic     uint32 mpiMagic
//	4   version   uint8  (1)
//	5   dtype     uint8
//	6   dims      uint8  number of dimensions, at most maxDims
//	7   zero      uint8
//	8   tag.Stage int32
//	12  tag.Micro int32
//	16  dims      maxDims × uint64, unused ones zero
const (
	mpiMagic     = 0x4d475050 // "PPGM"
	mpiVersion   = 1
	mpiHeaderLen = 16 + 8*maxDims
	// mpiAbortTag carries abort news (mpiNewsLen bytes); the channel tags
	// stay below it.
	mpiAbortTag = 2 * int(NumChannels)
	mpiNewsLen  = 1024
)

// mpiTag is the MPI tag of a channel's header (part 0) or payload (part 1).
func mpiTag(ch Channel, part int) int { return 2*int(ch) + part }

// mpiHeader is a decoded, validated header.
type mpiHeader struct {
	tag  Tag
	dt   uint8
	dims []int
	n    int64 // payload bytes
}

// encodeMPIHeader writes the header of a tensor v tagged tag into b
// (mpiHeaderLen bytes).
func encodeMPIHeader(b []byte, tag Tag, v view) {
	clear(b[:mpiHeaderLen])
	binary.LittleEndian.PutUint32(b[0:], mpiMagic)
	b[4], b[5], b[6] = mpiVersion, v.dt, uint8(len(v.dims))
	binary.LittleEndian.PutUint32(b[8:], uint32(tag.Stage))
	binary.LittleEndian.PutUint32(b[12:], uint32(tag.Micro))
	for i, d := range v.dims {
		binary.LittleEndian.PutUint64(b[16+8*i:], uint64(d))
	}
}

// decodeMPIHeader decodes and validates a header received from a peer:
// every size is computed with overflow checks, and a header that passes
// describes a payload of exactly the element size times the product of the
// dims, at most maxBytes. Errors wrap ErrProtocol or ErrFrameTooLarge and
// read as what the peer "sent".
func decodeMPIHeader(b []byte, maxBytes int64) (mpiHeader, error) {
	var h mpiHeader
	if len(b) != mpiHeaderLen {
		return h, fmt.Errorf("%w: sent a header of %d bytes, want %d", ErrProtocol, len(b), mpiHeaderLen)
	}
	if m := binary.LittleEndian.Uint32(b); m != mpiMagic {
		return h, fmt.Errorf("%w: sent a corrupt header (bad magic %#08x)", ErrProtocol, m)
	}
	if b[4] != mpiVersion {
		return h, fmt.Errorf("%w: sent a header of version %d, this build speaks %d (run the same ppgen build on every rank)", ErrProtocol, b[4], mpiVersion)
	}
	h.dt = b[5]
	es := elemSize(h.dt)
	if es == 0 {
		return h, fmt.Errorf("%w: sent unknown dtype code %d", ErrProtocol, h.dt)
	}
	nd := int(b[6])
	if nd > maxDims || b[7] != 0 {
		return h, fmt.Errorf("%w: sent a header with %d dimensions (at most %d) or a nonzero pad byte %d", ErrProtocol, nd, maxDims, b[7])
	}
	h.tag = Tag{Stage: int32(binary.LittleEndian.Uint32(b[8:])), Micro: int32(binary.LittleEndian.Uint32(b[12:]))}
	h.dims = make([]int, nd)
	n := uint64(es)
	for i := range maxDims {
		d := binary.LittleEndian.Uint64(b[16+8*i:])
		if i >= nd {
			if d != 0 {
				return h, fmt.Errorf("%w: sent a header with a nonzero unused dimension %d", ErrProtocol, i)
			}
			continue
		}
		if d > uint64(maxBytes) {
			return h, fmt.Errorf("%w: sent dimension %d of %d elements, over the %d-byte message cap (MPIConfig.MaxMessageBytes)", ErrFrameTooLarge, i, d, maxBytes)
		}
		hi, lo := bits.Mul64(n, d)
		if hi != 0 || lo > uint64(maxBytes) {
			return h, fmt.Errorf("%w: sent a tensor of shape %v... over the %d-byte message cap (MPIConfig.MaxMessageBytes)", ErrFrameTooLarge, h.dims[:i], maxBytes)
		}
		n = lo
		h.dims[i] = int(d)
	}
	if n > uint64(maxBytes) { // a scalar's one element: the loop checked none
		return h, fmt.Errorf("%w: sent a tensor of shape %v, %d bytes, over the %d-byte message cap (MPIConfig.MaxMessageBytes)", ErrFrameTooLarge, h.dims, n, maxBytes)
	}
	h.n = int64(n)
	return h, nil
}

// encodeMPINews writes an abort's news into b (mpiNewsLen bytes): the rank
// at fault, the observing rank (-1: the same), the sentinel code and the
// reason, truncated to fit.
func encodeMPINews(b []byte, news *PeerError) {
	clear(b[:mpiNewsLen])
	via := int32(-1)
	if news.Relayed {
		via = int32(news.Via)
	}
	binary.LittleEndian.PutUint32(b[0:], uint32(int32(news.Peer)))
	binary.LittleEndian.PutUint32(b[4:], uint32(via))
	b[8] = sentinelCode(news.Err)
	r := news.Reason
	if len(r) > mpiNewsLen-12 {
		r = r[:mpiNewsLen-12]
	}
	binary.LittleEndian.PutUint16(b[10:], uint16(len(r)))
	copy(b[12:], r)
}

// decodeMPINews reads news that rank src sent (world ranks), refusing
// out-of-range ranks and lengths.
func decodeMPINews(b []byte, src, world int) *PeerError {
	if len(b) != mpiNewsLen {
		return &PeerError{Peer: src, Reason: fmt.Sprintf("sent malformed abort news (%d bytes)", len(b)), Err: ErrProtocol}
	}
	peer := int(int32(binary.LittleEndian.Uint32(b[0:])))
	via := int(int32(binary.LittleEndian.Uint32(b[4:])))
	n := int(binary.LittleEndian.Uint16(b[10:]))
	if peer < 0 || peer >= world || via < -1 || via >= world || n > mpiNewsLen-12 {
		return &PeerError{Peer: src, Reason: "sent malformed abort news", Err: ErrProtocol}
	}
	e := &PeerError{Peer: peer, Reason: string(b[12 : 12+n]), Err: sentinelOf(b[8])}
	if peer != src {
		e.Relayed, e.Via = true, src
	}
	return e
}
