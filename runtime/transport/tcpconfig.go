package transport

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/launch"
)

// TCPConfig configures [DialTCP]. Zero durations and sizes take the defaults.
type TCPConfig struct {
	Rank, World int

	// MasterAddr is host:port where rank 0 listens for the rendezvous
	// (torchrun's MASTER_ADDR:MASTER_PORT).
	MasterAddr string
	// Listener, on rank 0 only, is used for the rendezvous instead of
	// listening on MasterAddr (tests pass a listener on port 0 to avoid port
	// races). DialTCP closes it when the rendezvous ends.
	Listener net.Listener
	// ListenHost is the host or IP ranks >= 1 listen on for peer connections
	// (on an ephemeral port). Default: the local address of this rank's
	// connection to the master, i.e. the interface that reaches it.
	ListenHost string

	// Token is a secret shared by all ranks. The handshake proves knowledge
	// of it (HMAC-SHA256 challenge-response, the dialer first) before
	// anything else is said, and every frame is authenticated with keys
	// derived from it; it never crosses the wire. With World > 1 an empty
	// Token is refused unless AllowNoToken is set, and so is a token of less
	// than 128 bits of entropy as launch.CheckToken counts them (32 hex
	// digits, 22 base64 characters: openssl rand -hex 16).
	Token string
	// Fingerprint identifies the schedule (generated code's Fingerprint).
	// Ranks with different fingerprints refuse each other.
	Fingerprint string
	// Schedule describes the schedule for people, e.g. pipe.Spec's Describe
	// ("zbv (P=4, V=2, M=8)"): a rank that refuses another (another
	// fingerprint, another world size) names the schedule each runs. It is
	// sent only to ranks that proved the token, and never compared: the
	// fingerprint decides. At most MaxScheduleLen bytes of printable text.
	Schedule string
	// AllowNoToken lets a World > 1 job start with an empty Token (no
	// authentication: anyone who reaches the port can join). It is the
	// explicit opt-out, PPGEN_ALLOW_NO_TOKEN=1 in the environment; without
	// it an empty Token is refused. DialTCP logs a warning when it is used.
	AllowNoToken bool
	// PlainFrames sends and expects frames without MACs or sequence
	// numbers: the opt-out of frame authentication for trusted networks,
	// PPGEN_PLAIN_FRAMES=1 in the environment. Every rank must agree (the
	// handshake refuses a peer that differs); DialTCP logs a warning when it
	// is set.
	PlainFrames bool

	// Timeout bounds every send (socket write) and every receive wait: an
	// operation that makes no progress for this long fails with a
	// *ProgressError naming this rank, the peer and the channel. A peer that
	// still heartbeats but is stuck is caught by it (a dead one by
	// HeartbeatTimeout). PPGEN_TIMEOUT sets it (runtime/launch). Default
	// DefaultTimeout.
	Timeout time.Duration
	// RendezvousTimeout bounds the whole connection phase. Default 2 minutes.
	RendezvousTimeout time.Duration
	// HandshakeTimeout bounds each connection's handshake (authentication
	// and hello) on both sides: a connection silent for longer is dropped,
	// during the rendezvous and after it. Default DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// AbortLinger bounds how long rank 0 stays in DialTCP after a failed
	// rendezvous to tell the ranks that have not heard yet why it failed
	// (they would otherwise retry until their RendezvousTimeout). Default
	// 10 s; it ends early once every rank has been told.
	AbortLinger time.Duration
	// HeartbeatInterval is how often an idle connection carries a heartbeat.
	// Default 1 s.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a peer may stay silent before it counts as
	// dead (process killed without the kernel resetting the connection, host
	// gone, process hung). Default 6 s.
	HeartbeatTimeout time.Duration
	// MaxFrameBytes caps one message (header included) in both directions.
	// Default 1 GiB.
	MaxFrameBytes int64
	// RecvQueueBytes bounds, per peer, the bytes of frames received from it
	// and not yet taken by Recv (all channels together), each frame counted
	// with what it costs in memory beyond its bytes (frameOverhead, 512), so
	// that many tiny frames are bounded as much as a few large ones. When the queue
	// reaches it, this rank stops reading that peer's connection until Recv
	// drains it, so TCP flow control blocks the sender (whose Send then fails
	// after Timeout); memory stays bounded whatever a peer sends. A frame
	// arriving at an empty queue is always taken, so the queue holds at most
	// max(RecvQueueBytes, MaxFrameBytes). A correct schedule never waits on
	// it as long as the bytes one peer has in flight to this rank (sent, not
	// yet received) stay under it. It also bounds the free arrays the rank
	// keeps for later receives (Recycler). Default DefaultRecvQueueBytes.
	RecvQueueBytes int64

	// Logger receives connection lifecycle logs (Debug) and warnings:
	// refused connections with their remote address, the AllowNoToken
	// opt-out, failures. Default: slog.Default(), so that warnings are not
	// lost.
	Logger *slog.Logger
}

// Defaults of TCPConfig.
const (
	DefaultRendezvousTimeout = 2 * time.Minute
	DefaultHeartbeatInterval = time.Second
	DefaultHeartbeatTimeout  = 6 * time.Second
	DefaultMaxFrameBytes     = 1 << 30
	DefaultHandshakeTimeout  = 10 * time.Second
	DefaultRecvQueueBytes    = 256 << 20
)

// maxFrameCap bounds MaxFrameBytes and RecvQueueBytes, so sizes derived
// from them never overflow.
const maxFrameCap = 1 << 40

// noTokenHelp is how to fix a missing token.
const noTokenHelp = "set PPGEN_TOKEN to the same random secret on every rank, e.g. PPGEN_TOKEN=$(openssl rand -hex 16); " +
	"ppgen launch and ppgen template generate one; PPGEN_ALLOW_NO_TOKEN=1 opts out (then anyone who reaches the ports can join)"

func (c *TCPConfig) fill() error {
	if c.World < 1 {
		return fmt.Errorf("world size %d < 1", c.World)
	}
	if c.Rank < 0 || c.Rank >= c.World {
		return fmt.Errorf("rank %d out of range [0, %d)", c.Rank, c.World)
	}
	if c.World > 1 && c.MasterAddr == "" && !(c.Rank == 0 && c.Listener != nil) {
		return errors.New("MasterAddr is empty")
	}
	if len(c.Schedule) > MaxScheduleLen || !wire.Printable(c.Schedule) {
		return fmt.Errorf("Schedule %.80q: want at most %d bytes of printable text (pipe.Spec's Describe)", c.Schedule, MaxScheduleLen)
	}
	if len(c.Fingerprint) > maxFieldLen || !wire.Printable(c.Fingerprint) {
		return fmt.Errorf("Fingerprint %.80q: want at most %d bytes of printable text (the generated code's Fingerprint)", c.Fingerprint, maxFieldLen)
	}
	if c.World > 1 && c.Token == "" && !c.AllowNoToken {
		return errors.New("no shared token, so any process that reaches the ports could join the job: " + noTokenHelp)
	}
	if c.Token != "" {
		if err := launch.CheckToken(c.Token); err != nil {
			return err
		}
	}
	wire.OrDefault(&c.Timeout, DefaultTimeout)
	wire.OrDefault(&c.HandshakeTimeout, DefaultHandshakeTimeout)
	wire.OrDefault(&c.AbortLinger, defaultAbortLinger)
	wire.OrDefault(&c.RendezvousTimeout, DefaultRendezvousTimeout)
	wire.OrDefault(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	wire.OrDefault(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	if c.HeartbeatTimeout < 2*c.HeartbeatInterval {
		return fmt.Errorf("HeartbeatTimeout %v must be at least twice HeartbeatInterval %v", c.HeartbeatTimeout, c.HeartbeatInterval)
	}
	wire.OrDefault(&c.MaxFrameBytes, DefaultMaxFrameBytes)
	if c.MaxFrameBytes < frameHdrLen+8*wire.MaxDims || c.MaxFrameBytes > maxFrameCap {
		return fmt.Errorf("MaxFrameBytes %d outside [%d, %d]", c.MaxFrameBytes, frameHdrLen+8*wire.MaxDims, int64(maxFrameCap))
	}
	wire.OrDefault(&c.RecvQueueBytes, DefaultRecvQueueBytes)
	if c.RecvQueueBytes > maxFrameCap {
		return fmt.Errorf("RecvQueueBytes %d over %d", c.RecvQueueBytes, int64(maxFrameCap))
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
