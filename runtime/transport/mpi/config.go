// Package mpi is the MPI transport: a transport.Transport, Batcher,
// Fingerprinter and Collectives over MPI's point-to-point calls and its own
// collectives, through cgo (build tag mpi; OpenMPI through pkg-config's
// ompi-c, or MPICH with -tags mpi,mpich). Without the tag, [New] returns
// [ErrNotBuilt], which says how to rebuild. docs/internals.md, "The MPI
// transport", has the message format, the pinning of buffers, the
// synchronous mode and the abort.
package mpi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
)

// ErrNotBuilt is returned by [New] in a build without the mpi tag.
var ErrNotBuilt = errors.New("ppgen built without MPI: rebuild with -tags mpi (needs libopenmpi-dev or an MPICH)")

// Error is a failed MPI call: the transport's communicators return MPI's
// errors (MPI_ERRORS_RETURN, on MPI_COMM_WORLD and MPI_COMM_SELF too)
// instead of ending the job, and each becomes an Error naming the call,
// MPI's error code and class and its message. It wraps
// transport.ErrProtocol. Class MPI_ERR_TRUNCATE (a message or collective
// larger than its receiving side) gets a hint: the members disagree on a
// size.
type Error struct {
	Call    string // "MPI_Isend (payload)", "MPI_Test (MPI_Iallreduce)", …
	Code    int    // MPI's error code
	Class   int    // its class (MPI_Error_class)
	Message string // MPI_Error_string
	Hint    string // what the class usually means here; may be empty
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%v: %s: %s (MPI error %d, class %d)", transport.ErrProtocol, e.Call, e.Message, e.Code, e.Class)
	if e.Hint != "" {
		s += ": " + e.Hint
	}
	return s
}

func (e *Error) Unwrap() error { return transport.ErrProtocol }

// truncateHint is Error.Hint of class MPI_ERR_TRUNCATE.
const truncateHint = "the ranks disagree on a message's or collective's size (members must run the same collectives, with the same element counts and dtypes, in the same order)"

// Config configures [New]. Zero values take the defaults. The rank
// and world size come from MPI (MPI_COMM_WORLD), not from the
// configuration.
type Config struct {
	// Sync makes every send synchronous: Send returns only once the
	// peer's matching Recv has started, which is the strict rendezvous
	// semantics ppgen's verifier proves schedules safe under. A schedule
	// that relies on buffering then fails with a *ProgressError after
	// Timeout instead of hanging. Without Sync, sends are buffered: each
	// rank keeps receiving into its receive queue (RecvQueueBytes) whatever
	// its peers send, so Send returns once the message is in the peer's
	// queue, without waiting for the matching Recv.
	Sync bool
	// Timeout bounds every wait (a send's completion, a receive's arrival,
	// the start-up checks, Close's barrier): one that makes no progress for
	// this long fails with a *ProgressError naming this rank, the peer, the
	// channel and the last message received there. PPGEN_TIMEOUT sets it
	// (runtime/launch). Default DefaultTimeout.
	Timeout time.Duration
	// Fingerprint identifies the schedule. New compares a hash of it
	// across all ranks (an allgather) and refuses to start, on every rank,
	// naming the ranks that differ.
	Fingerprint string
	// Schedule describes the schedule for people, e.g. pipe.Spec's
	// Describe ("zbv (P=4, V=2, M=8)"): the refusal names what each group of
	// ranks runs. Only messages use it; the fingerprint decides. At most
	// MaxScheduleLen bytes of printable text.
	Schedule string
	// MaxMessageBytes caps one message's payload in both directions.
	// Default DefaultMaxFrameBytes (1 GiB); at most MaxMessageBytes (an
	// MPI count is a C int).
	MaxMessageBytes int64
	// RecvQueueBytes bounds, per peer, the messages received from it and
	// not yet taken by Recv (buffered mode; under Sync nothing is received
	// before its Recv), each counted with its bytes plus what it costs in
	// memory beyond them (wire.FrameOverhead, 512), as over TCP. When the
	// queue reaches it, this rank stops receiving from that peer until Recv
	// drains it, so the peer's Send waits (and fails after Timeout); the
	// queue holds at most RecvQueueBytes plus one message per channel.
	// Default transport.DefaultRecvQueueBytes (256 MiB).
	RecvQueueBytes int64
	// RecvQueueFrames bounds, per peer, the number of queued messages the
	// same way. Default DefaultRecvQueueFrames.
	RecvQueueFrames int
	// AbortLinger is how long Abort waits, after telling every peer why
	// this rank aborts, before it calls MPI_Abort: peers that are waiting
	// on this rank log their own failed step in that time. Default 300 ms.
	AbortLinger time.Duration
	// Logger receives the abort cause and warnings. Default slog.Default().
	Logger *slog.Logger
}

// MaxMessageBytes bounds Config.MaxMessageBytes: MPI counts bytes in
// a C int.
const MaxMessageBytes = 1<<31 - 1

const defaultMPIAbortLinger = 300 * time.Millisecond

// DefaultRecvQueueFrames is Config.RecvQueueFrames's default.
const DefaultRecvQueueFrames = 1 << 16

func (c *Config) fill() error {
	wire.OrDefault(&c.Timeout, transport.DefaultTimeout)
	wire.OrDefault(&c.AbortLinger, defaultMPIAbortLinger)
	wire.OrDefault(&c.MaxMessageBytes, transport.DefaultMaxFrameBytes)
	wire.OrDefault(&c.RecvQueueBytes, transport.DefaultRecvQueueBytes)
	wire.OrDefault(&c.RecvQueueFrames, DefaultRecvQueueFrames)
	if c.RecvQueueBytes < 0 || c.RecvQueueFrames < 0 {
		return fmt.Errorf("RecvQueueBytes %d, RecvQueueFrames %d: want positive bounds (0 takes the default)", c.RecvQueueBytes, c.RecvQueueFrames)
	}
	if c.MaxMessageBytes > MaxMessageBytes {
		return fmt.Errorf("MaxMessageBytes %d over %d (MPI counts bytes in a C int)", c.MaxMessageBytes, int64(MaxMessageBytes))
	}
	if len(c.Schedule) > transport.MaxScheduleLen || !wire.Printable(c.Schedule) {
		return fmt.Errorf("Schedule %.80q: want at most %d bytes of printable text (pipe.Spec's Describe)", c.Schedule, transport.MaxScheduleLen)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// The MPI transport sends each message as one or two MPI messages on the
// same communicator, each on its channel's tag for its part:
//
//	tag = 2*channel + part    part 0: header, part 1: payload
//
// A payload of at most mpiInlineBytes travels in the header's message,
// right after the header; a larger one follows as its own message, which
// the receiver receives straight into the tensor it returns. MPI does not
// let messages of one (source, tag, communicator) overtake each other, so
// headers and payloads each arrive in send order per (peer, channel), and
// the k-th payload belongs to the k-th header that has none inline. The
// header tells the receiver the dtype and shape, hence the payload's exact
// size, before it posts the payload's receive.
//
// A large send, and under Config.Sync every send, is synchronous in MPI's
// sense (MPI_Issend): it completes once the receiver matched it, so nothing
// piles up unmatched in MPI's own queues; buffering is the receiver's
// receive queue (Config.RecvQueueBytes), whose header receives stay posted
// while it has room. Small buffered sends are MPI_Isends with a periodic
// MPI_Issend marker (p2p.go, markEvery).
//
// The header (mpiHeaderLen bytes, little-endian):
//
//	0   magic     uint32 mpiMagic
//	4   version   uint8  (2)
//	5   dtype     uint8
//	6   dims      uint8  number of dimensions, at most wire.MaxDims
//	7   zero      uint8
//	8   tag.Stage int32
//	12  tag.Micro int32
//	16  dims      wire.MaxDims × uint64, unused ones zero
const (
	mpiMagic     = 0x4d475050 // "PPGM"
	mpiVersion   = 2
	mpiHeaderLen = 16 + 8*wire.MaxDims
	// mpiInlineBytes is the largest payload sent in the header's message.
	mpiInlineBytes = 8 << 10
	// mpiAbortTag carries abort news (mpiNewsLen bytes); the channel tags
	// stay below it.
	mpiAbortTag = 2 * wire.Channels
	mpiNewsLen  = 1024
)

// mpiTag is the MPI tag of a channel's header (part 0) or payload (part 1),
// the channel by its wire code (0 act, 1 grad, 2 data).
func mpiTag(ch abi.Channel, part int) int { return 2*int(wire.ChannelCode(ch)) + part }

// mpiHeader is a decoded, validated header.
type mpiHeader struct {
	tag  transport.Tag
	dt   uint8
	dims []int
	n    int64 // payload bytes
}

// encodeMPIHeader writes the header of a tensor v tagged tag into b
// (mpiHeaderLen bytes).
func encodeMPIHeader(b []byte, tag transport.Tag, v wire.Payload) {
	clear(b[:mpiHeaderLen])
	binary.LittleEndian.PutUint32(b[0:], mpiMagic)
	b[4], b[5], b[6] = mpiVersion, v.Dtype, uint8(len(v.Dims))
	binary.LittleEndian.PutUint32(b[8:], uint32(tag.Stage))
	binary.LittleEndian.PutUint32(b[12:], uint32(tag.Micro))
	for i, d := range v.Dims {
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
		return h, fmt.Errorf("%w: sent a header of %d bytes, want %d", transport.ErrProtocol, len(b), mpiHeaderLen)
	}
	if m := binary.LittleEndian.Uint32(b); m != mpiMagic {
		return h, fmt.Errorf("%w: sent a corrupt header (bad magic %#08x)", transport.ErrProtocol, m)
	}
	if b[4] != mpiVersion {
		return h, fmt.Errorf("%w: sent a header of version %d, this build speaks %d (run the same ppgen build on every rank)", transport.ErrProtocol, b[4], mpiVersion)
	}
	h.dt = b[5]
	nd := int(b[6])
	if nd > wire.MaxDims || b[7] != 0 {
		return h, fmt.Errorf("%w: sent a header with %d dimensions (at most %d) or a nonzero pad byte %d", transport.ErrProtocol, nd, wire.MaxDims, b[7])
	}
	h.tag = transport.Tag{Stage: int32(binary.LittleEndian.Uint32(b[8:])), Micro: int32(binary.LittleEndian.Uint32(b[12:]))}
	var dims [wire.MaxDims]uint64
	for i := range dims {
		dims[i] = binary.LittleEndian.Uint64(b[16+8*i:])
		if i >= nd && dims[i] != 0 {
			return h, fmt.Errorf("%w: sent a header with a nonzero unused dimension %d", transport.ErrProtocol, i)
		}
	}
	var err error
	h.dims, h.n, err = wire.Shape(h.dt, dims[:nd], maxBytes, "mpi.Config.MaxMessageBytes")
	return h, err
}

// encodeMPINews writes an abort's news into b (mpiNewsLen bytes): the rank
// at fault, the observing rank (-1: the same), the sentinel code and the
// reason, truncated to fit. It returns the bytes used (12 and the reason's),
// which is what is sent.
func encodeMPINews(b []byte, news *transport.PeerError) int {
	clear(b[:mpiNewsLen])
	via := int32(-1)
	if news.Relayed {
		via = int32(news.Via)
	}
	binary.LittleEndian.PutUint32(b[0:], uint32(int32(news.Peer)))
	binary.LittleEndian.PutUint32(b[4:], uint32(via))
	b[8] = wire.SentinelCode(news.Err)
	r := news.Reason
	if len(r) > mpiNewsLen-12 {
		r = r[:mpiNewsLen-12]
	}
	binary.LittleEndian.PutUint16(b[10:], uint16(len(r)))
	copy(b[12:], r)
	return 12 + len(r)
}

// decodeMPINews reads news that rank src sent (world ranks): b is what
// was received (its length MPI's count, not the receive buffer's), so a
// reason is read only within it. It refuses out-of-range ranks and lengths
// (a reason longer than what arrived: a 12-byte notice that claims 200
// bytes of reason).
func decodeMPINews(b []byte, src, world int) *transport.PeerError {
	if len(b) < 12 || len(b) > mpiNewsLen {
		return &transport.PeerError{Peer: src, Reason: fmt.Sprintf("sent malformed abort news (%d bytes; want 12 to %d)", len(b), mpiNewsLen), Err: transport.ErrProtocol}
	}
	peer := int(int32(binary.LittleEndian.Uint32(b[0:])))
	via := int(int32(binary.LittleEndian.Uint32(b[4:])))
	n := int(binary.LittleEndian.Uint16(b[10:]))
	if peer < 0 || peer >= world || via < -1 || via >= world || n > len(b)-12 {
		return &transport.PeerError{Peer: src, Reason: fmt.Sprintf("sent malformed abort news (rank %d, via %d, a reason of %d bytes in %d)", peer, via, n, len(b)-12), Err: transport.ErrProtocol}
	}
	e := &transport.PeerError{Peer: peer, Reason: string(b[12 : 12+n]), Err: wire.SentinelOf(b[8])}
	if peer != src {
		e.Relayed, e.Via = true, src
	}
	return e
}
