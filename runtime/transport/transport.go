// Package transport moves tensors between the ranks of a pipeline.
//
// A [Transport] is one rank's endpoint. It sends and receives *tensor.Dense
// values (float32 or float64, any shape, scalars included) to and from a peer
// rank on a channel ([abi.Channel]: act, grad, data). Messages are matched FIFO per
// (source rank, destination rank, channel): the k-th Recv from peer p on
// channel c returns the k-th message p sent to this rank on c, whatever was
// sent on other channels or by other peers in between. Sends are buffered:
// Send returns once the message is handed to the transport (queued in
// process, or written to the socket) and never waits for the matching Recv.
//
// Every message carries a [Tag], the (stage, micro) of the sending step, so a
// receiver can check that sender and receiver agree on what is being moved.
//
// # Receive buffers
//
// A tensor Recv returns is owned by the caller. Both transports also
// implement [Recycler]: a caller that knows when it is done with a received
// tensor hands it back with Recycle, and a later receive of the same dtype
// and element count lands in its memory instead of a fresh allocation (the
// cost of a fresh 4 MiB buffer per message is most of the gap to a raw
// socket copy). The rule is the caller's: Recycle a tensor only once
// nothing uses it or any tensor sharing its memory any more (runtime/pipe
// does at the end of the chunk's backward, see docs/internals.md, "Received
// tensors"). The transport takes back only tensors it lent, each once, still
// holding the array they were lent with; anything else (a second Recycle, a
// view, a copy, a foreign tensor) is ignored, so two live receives never
// share memory. Tensors under 16 KiB are not pooled, and the free arrays a
// rank keeps are bounded (RecvQueueBytes for TCP). A caller that never
// recycles gets a fresh tensor per receive, as before.
//
// This package has two implementations; runtime/transport/mpi (MPI, build
// tag mpi) and runtime/transport/nccl (NCCL) have the others, sharing the
// wire's dtype codes, shape validation and errors (runtime/internal/wire):
//
//   - [NewInProc]: goroutines and unbounded queues, for tests and
//     single-process runs. A send copies the tensor, so the receiver owns its
//     copy and the sender may reuse its own.
//   - [DialTCP]: one TCP connection per peer pair, length-framed messages with
//     a size cap, a handshake that authenticates with a shared token and then
//     checks world size, rank and schedule fingerprint, heartbeats so a dead
//     or hung peer is detected within a bounded time.
//
// # Trust (TCP)
//
// Nothing a peer sends may crash a rank or grow its memory without bound:
//
//   - Authentication comes first. World > 1 needs a shared token
//     ([TCPConfig.Token], PPGEN_TOKEN) unless AllowNoToken
//     (PPGEN_ALLOW_NO_TOKEN=1) opts out, which is logged as a warning; a
//     token under 128 bits is refused (launch.CheckToken). Each connection
//     begins with an HMAC-SHA256 challenge-response in which the dialer
//     proves the token first, so a listener is no offline oracle; no side
//     says anything about the job (fingerprint, world size, ranks,
//     addresses) before the other proved the token.
//   - Every frame is authenticated (GMAC tags with keys derived from the
//     token and the handshake's nonces, and a sequence number): an injected,
//     forged or replayed frame fails the rank naming the peer.
//     PlainFrames (PPGEN_PLAIN_FRAMES=1) opts out, logged as a warning.
//   - During the rendezvous, a connection that sends junk, fails
//     authentication, sends a malformed hello or stays silent past
//     HandshakeTimeout (default 10 s) is logged with its remote address and
//     dropped; the rendezvous goes on. A peer that did authenticate but
//     disagrees (fingerprint, world size, a rank claimed twice) is a real
//     mismatch: the rendezvous fails naming the rank and its address. When
//     the rendezvous ends, every listener and every unfinished connection is
//     closed. At most 64 handshakes run at once per listener, an accept
//     loop out of file descriptors backs off and keeps serving, and
//     refusals are logged at most once a second (with a count).
//   - Every frame header is validated with overflow-checked arithmetic
//     (decodeHeader) before anything is allocated: payload = element size ×
//     ∏dims exactly, within MaxFrameBytes (default 1 GiB).
//   - Receive queues are bounded per peer (RecvQueueBytes, default 256 MiB):
//     when full, the reader stops reading that connection until Recv drains
//     it, so TCP flow control blocks the sender.
//   - A panic in any transport goroutine becomes the rank's error
//     ("transport: rank R: reader for peer P panicked: ...", wrapping
//     [ErrPanicked]) and aborts the rank; it never crashes the process.
//
// docs/internals.md describes the handshake order, docs/trust.md lists the
// bad peers tried.
//
// # Failure
//
// All waits are bounded by a configurable timeout (TCPConfig.Timeout,
// PPGEN_TIMEOUT): a send or receive that makes no progress for that long
// fails with a [*ProgressError] naming this rank, the peer, the channel and
// the last message received there. Errors name the peer
// (see [PeerError]). [Transport.Close] is a graceful goodbye: what was sent
// before it can still be received; a Recv that would need more fails with
// "rank N closed the connection". [Transport.Abort] is abrupt: every pending
// and future operation on this rank fails, and every peer's pending and future
// operations fail with "rank N aborted: <cause>", so one failed rank cannot
// leave the others hanging. A peer that disappears without a goodbye (killed
// process, reset connection, missed heartbeats) fails the whole transport with
// an error naming it.
package transport

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/launch"
	"gorgonia.org/tensor"
)

// Tag identifies a message: the stage and micro-batch of the step that sent it.
// Transports carry it unchanged; they do not interpret it.
type Tag struct {
	Stage, Micro int32
}

func (t Tag) String() string { return fmt.Sprintf("(stage %d, micro %d)", t.Stage, t.Micro) }

// Transport is one rank's endpoint of a world of ranks.
//
// Send and Recv may be called from any goroutine, but Recv calls for the same
// (peer, channel) must not run concurrently (they would race for the FIFO
// order). Neither method retains t after it returns: TCP writes it out before
// returning and the in-process transport copies it.
type Transport interface {
	// Rank is this endpoint's rank.
	Rank() int
	// World is the number of ranks.
	World() int
	// Send hands t, tagged tag, to the transport for delivery to peer on ch.
	Send(peer int, ch abi.Channel, tag Tag, t *tensor.Dense) error
	// Recv waits (bounded by the transport's timeout) for the next message
	// from peer on ch. The returned tensor is owned by the caller: no other
	// live tensor shares its memory (it may reuse the memory of a tensor
	// the caller handed back with [Recycler.Recycle]).
	Recv(peer int, ch abi.Channel) (Tag, *tensor.Dense, error)
	// Close says goodbye to every peer: messages already sent stay
	// receivable, later receives from this rank fail. Idempotent.
	Close() error
	// Abort fails every pending and future operation here and at every peer,
	// with an error naming this rank and cause. Idempotent; cheap if already
	// closed or failed.
	Abort(cause error)
}

// Recycler is implemented by transports whose receives can land in reused
// memory (TCP, in-process, MPI). Recycle hands back t, a tensor Recv returned:
// a later Recv (from any peer, on any channel) may write into its memory.
// The caller must be done with t and with every tensor sharing its memory
// (views, reshapes, whatever it gave them to) before calling it. Tensors
// the transport did not lend, or lent and already took back, are ignored,
// so a mistaken second Recycle cannot make two receives share memory.
// Recycle may be called from any goroutine; it never blocks on the network.
type Recycler interface {
	Recycle(t *tensor.Dense)
}

// Fingerprinter is implemented by transports that checked a schedule
// fingerprint with their peers (TCP). runtime/pipe compares it with the Spec.
type Fingerprinter interface {
	Fingerprint() string
}

// Sentinel causes, for errors.Is. Errors returned by transports wrap one of
// them, usually inside a *PeerError. They are runtime/internal/wire's, which
// the transports outside this package (MPI, NCCL) and the shape validation
// wrap too.

// ErrClosed: this rank's transport was closed.
var ErrClosed = wire.ErrClosed

// ErrPeerClosed: the peer said goodbye (Close) and this rank wanted more.
var ErrPeerClosed = wire.ErrPeerClosed

// ErrAborted: a rank aborted (Abort); the *PeerError names it and why.
var ErrAborted = wire.ErrAborted

// ErrTimeout: a wait made no progress for the transport's timeout, or a
// peer missed its heartbeats.
var ErrTimeout = wire.ErrTimeout

// ErrFrameTooLarge: a message over the receiving rank's cap.
var ErrFrameTooLarge = wire.ErrFrameTooLarge

// ErrHandshake: the ranks disagree (token, world size, ranks, schedule).
var ErrHandshake = wire.ErrHandshake

// ErrProtocol: a peer broke the protocol (a malformed header, a corrupt
// frame, a failed call of the engine).
var ErrProtocol = wire.ErrProtocol

// ErrPanicked: a transport goroutine panicked; the rank failed instead of
// crashing.
var ErrPanicked = wire.ErrPanicked

// ProgressError is a send or receive that waited the transport's timeout
// without progress: the peer sent nothing on the channel (receive), or did
// not read what this rank sent (send), although the connection is alive (a
// dead peer is a *PeerError from the heartbeat instead). It names this rank,
// the peer, the channel and the last message received there, and wraps the
// *PeerError that blames the peer (so errors.Is(err, ErrTimeout) holds and
// aborts relay the peer's name).
type ProgressError struct {
	Rank    int
	Op      string // "recv" or "send"
	Peer    int
	Ch      abi.Channel
	Waited  time.Duration
	Setting string // what sets the timeout: "PPGEN_TIMEOUT" (TCPConfig.Timeout), "InProcTimeout"
	Last    *Tag   // recv: the last message received from Peer on Ch, nil if none
	Note    string // extra diagnosis, e.g. a full receive queue
	Err     *PeerError
}

// Detail is the message without the "transport: rank R: op ch peer" prefix:
// "no progress for 30s (PPGEN_TIMEOUT): ...". runtime/pipe puts it after the
// step that waited.
func (e *ProgressError) Detail() string {
	s := fmt.Sprintf("no progress for %v (%s)", e.Waited, e.Setting)
	if e.Op == "send" {
		s += fmt.Sprintf(": rank %d did not read %s", e.Peer, e.Ch)
	} else if e.Last != nil {
		s += fmt.Sprintf(": nothing arrived on %s after %v", e.Ch, *e.Last)
	} else {
		s += fmt.Sprintf(": nothing arrived on %s yet", e.Ch)
	}
	if e.Note != "" {
		s += "; " + e.Note
	}
	return s
}

func (e *ProgressError) Error() string {
	dir := "from"
	if e.Op == "send" {
		dir = "to"
	}
	return fmt.Sprintf("transport: rank %d: %s %s %s rank %d: %s", e.Rank, e.Op, e.Ch, dir, e.Peer, e.Detail())
}

// Unwrap returns the *PeerError blaming the peer.
func (e *ProgressError) Unwrap() error { return e.Err }

// NewProgressError is the *ProgressError of rank's op ("send" or "recv")
// with peer on ch, which waited waited without progress (setting names
// what sets the timeout), for every transport (NCCL's and MPI's too).
//
// The peer waited on is blamed unless a rank of this job on this host is
// stopped by a signal (launch.StoppedPeer: SIGSTOP, alive but silent): the
// peer may be waiting on that rank itself, and the first rank to time out
// relays its blame to all (AbortNews). The stopped rank is blamed then, and
// named in the note.
func NewProgressError(rank int, op string, peer int, ch abi.Channel, waited time.Duration, setting string, last *Tag, note string) *ProgressError {
	e := &ProgressError{Rank: rank, Op: op, Peer: peer, Ch: ch, Waited: waited, Setting: setting, Last: last, Note: note}
	reason := fmt.Sprintf("sent nothing on %s for %v (no progress, %s)", ch, waited, setting)
	if op == "send" {
		reason = fmt.Sprintf("did not read %s for %v (no progress, %s)", ch, waited, setting)
	}
	e.Err = &PeerError{Peer: peer, Reason: reason, Err: ErrTimeout}
	if r, pid, ok := launch.StoppedPeer(); ok && r != rank {
		stopped := fmt.Sprintf("rank %d is stopped by a signal (process %d on this host, state T)", r, pid)
		e.Note = strings.TrimPrefix(e.Note+"; "+stopped, "; ")
		e.Err = &PeerError{Peer: r, Reason: fmt.Sprintf("is stopped by a signal (SIGSTOP or SIGTSTP: process %d, state T), alive but silent; found by rank %d after %v without progress", pid, rank, waited), Err: ErrTimeout}
	}
	return e
}

// PeerError is a failure attributed to a peer rank: it closed the connection,
// aborted, stopped sending heartbeats, or broke the protocol. Its message
// always starts with "rank N".
//
// When a rank fails because of another rank's failure, its abort carries the
// original attribution: peers get the PeerError of the rank at the origin,
// with Relayed set and Via naming the rank that observed it first. So every
// survivor names the rank that actually failed, whichever abort reaches it
// first.
type PeerError struct {
	Peer    int    // the rank at fault
	Reason  string // e.g. "closed the connection (EOF)", "aborted: <cause>"
	Err     error  // sentinel cause: ErrPeerClosed, ErrAborted, ErrTimeout, ...
	Relayed bool   // learnt from another rank's abort rather than observed
	Via     int    // with Relayed: the rank that observed the failure
}

func (e *PeerError) Error() string {
	if e.Relayed {
		return fmt.Sprintf("rank %d %s (reported by rank %d)", e.Peer, e.Reason, e.Via)
	}
	return fmt.Sprintf("rank %d %s", e.Peer, e.Reason)
}

// Unwrap returns the sentinel cause.
func (e *PeerError) Unwrap() error { return e.Err }

// AbortNews is what rank self tells its peers when it aborts because of
// cause: the failure it relays (if cause is another rank's PeerError), or its
// own.
func AbortNews(self int, cause error) *PeerError {
	var pe *PeerError
	if errors.As(cause, &pe) && pe.Peer != self {
		news := *pe
		if !news.Relayed {
			news.Relayed, news.Via = true, self
		}
		return &news
	}
	return &PeerError{Peer: self, Reason: "aborted: " + cause.Error(), Err: ErrAborted}
}

// Defaults shared by the transports.
const (
	DefaultTimeout = 5 * time.Minute
)

// CheckPeer checks the peer and channel of rank's operation in a world of
// world ranks.
func CheckPeer(rank, world, peer int, ch abi.Channel) error {
	if peer < 0 || peer >= world {
		return fmt.Errorf("peer rank %d out of range [0, %d)", peer, world)
	}
	if peer == rank {
		return fmt.Errorf("peer rank %d is this rank", peer)
	}
	if !wire.ValidChannel(ch) {
		return fmt.Errorf("unknown channel %d", uint8(ch))
	}
	return nil
}

// SendError is the error of rank's send on ch to peer: "transport: rank 0:
// send act to rank 1: ...".
func SendError(rank int, ch abi.Channel, peer int, err error) error {
	return fmt.Errorf("transport: rank %d: send %s to rank %d: %w", rank, ch, peer, err)
}

// RecvError is the error of rank's receive on ch from peer.
func RecvError(rank int, ch abi.Channel, peer int, err error) error {
	return fmt.Errorf("transport: rank %d: recv %s from rank %d: %w", rank, ch, peer, err)
}

// PeerClosed is the error of a peer that closed its end in an orderly way.
func PeerClosed(peer int) *PeerError {
	return &PeerError{Peer: peer, Reason: "closed the connection", Err: ErrPeerClosed}
}
