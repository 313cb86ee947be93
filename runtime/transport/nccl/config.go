// Package nccl is a transport.Transport over NCCL point-to-point, with
// NCCL's own collectives (transport.Collectives), for ranks that each own a
// GPU. The CUDA runtime (libcudart.so) and NCCL
// (libnccl.so.2) are loaded at run time with purego: the package has no cgo,
// builds with CGO_ENABLED=0, and a binary that imports it runs on a machine
// without either library until [Dial] is called, which then fails with an
// error naming the library, the environment variable that points at it
// (PPGEN_CUDART_LIB, PPGEN_NCCL_LIB) and what to install.
//
// # Host tensors through the device
//
// ppgen's stages compute on the CPU (gorgonia tensors in host memory). This
// transport moves those host tensors through the GPU: a send copies the
// tensor into a device buffer (cudaMemcpyAsync), then ncclSend; a receive
// runs ncclRecv into a device buffer, then copies it out into a fresh host
// tensor. It is a transport for running ppgen's schedules on NCCL's
// rendezvous semantics and its interconnect (NVLink, InfiniBand), not a way
// of computing on the GPU.
//
// # Control connection, shapes first
//
// Every NCCL transport also holds a TCP transport ([transport.DialTCP]), the
// control connection, which does four things:
//
//   - the rendezvous (authentication, world size, ranks, schedule
//     fingerprint, as for TCP);
//   - the communicator: every rank reports to rank 0 that its libraries and
//     device are ready, rank 0 calls ncclGetUniqueId and sends the 128-byte
//     id to every rank, then every rank calls ncclCommInitRank;
//   - shapes first: NCCL needs a receive's element count before the receive
//     starts, and has no tags or channels. So every message is announced by a
//     small header over the control connection (channel, Tag, dtype, shape)
//     before its payload goes through NCCL. The control connection is
//     buffered, so a receiver learns the shape without a round trip through
//     the device, and a batch needs no extra group for its headers;
//   - liveness: heartbeats, and aborts relayed to every rank, so a rank that
//     dies or aborts is named by every survivor.
//
// NCCL matches sends and receives between two ranks in issue order, whatever
// the channel. The transport keeps the transport package's contract (FIFO per
// (peer, channel)) on top of that: a receive takes the headers of its peer in
// order, and a message on another channel that comes first is received too
// and kept until a receive on its channel asks for it (bounded by
// Config.MaxBufferedBytes).
//
// # Semantics
//
// Sends are rendezvous, as NCCL's: Send returns when the receiver has taken
// the message. One operation runs at a time per rank (NCCL orders a
// communicator's calls); concurrent calls are serialized. A [Batch] is one
// NCCL group (ncclGroupStart, every ncclSend and ncclRecv, ncclGroupEnd),
// so its ops complete in any order; only when a receive of the batch must
// first take a message of another channel from the same peer is the batch
// split at that point. Sends and receives to this rank itself are allowed
// (NCCL's self send/receive): a send to self is delivered at once and kept
// for the receive.
//
// Every wait polls cudaStreamQuery, bounded by the progress timeout
// (TCPConfig.Timeout, PPGEN_TIMEOUT): an operation that does not complete in
// time fails with a *transport.ProgressError, and the communicator is
// aborted. A watchdog goroutine polls ncclCommGetAsyncError every
// WatchInterval: on an error it aborts the communicator (ncclCommAbort, which
// ends the pending operations) and the control connection, so every peer
// fails naming this rank. A peer's abort, death or hang reported by the
// control connection aborts the communicator here the same way.
//
// # Collectives
//
// [Transport.NewGroup] makes an NCCL communicator of a group of world ranks
// (collective over its members only): member 0 calls ncclGetUniqueId and
// sends the id, with the member list, over the control connection, and
// every member calls ncclCommInitRank. Not ncclCommSplit of the world's
// communicator, which every rank of the world must call (runtime/collective
// builds a group on its first collective, which non-members never run) and
// which needs NCCL 2.18. A group has its own stream and device buffer; its
// collectives are ncclAllReduce, ncclAllGather, ncclReduceScatter and
// ncclBroadcast (sums, float32 and float64) and an all-to-all of grouped
// ncclSend and ncclRecv, on device copies of the host tensors, bounded by
// the progress timeout; a failure fails the transport as a failed Send does,
// and a peer's abort or failure is named. NCCL sums in its own order (see
// runtime/collective, "Native collectives").
//
// docs/internals.md ("The NCCL transport") describes the test double the tests
// run against and the GPU script (scripts/gpu-nccl.sh).
package nccl

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/transport"
)

// Config configures [Dial].
type Config struct {
	// TCP configures the control connection (see the package doc): the
	// rendezvous, the token, the fingerprint. Its Timeout is the progress
	// timeout of every NCCL operation, its RendezvousTimeout also bounds
	// the communicator's creation.
	TCP transport.TCPConfig
	// Device is this rank's CUDA device ordinal, or AutoDevice: LocalRank
	// modulo the number of devices.
	Device    int
	LocalRank int
	// CUDARTLib and NCCLLib are the libraries' paths. Empty: the
	// environment variables PPGEN_CUDART_LIB and PPGEN_NCCL_LIB, else the
	// default names (libcudart.so, .so.12, .so.11.0; libnccl.so.2) through
	// the dynamic loader's search path.
	CUDARTLib, NCCLLib string
	// WatchInterval is how often the watchdog polls the communicator's
	// asynchronous error. Default 50 ms.
	WatchInterval time.Duration
	// MaxMessageBytes caps one message's payload in both directions.
	// Default transport.DefaultMaxFrameBytes.
	MaxMessageBytes int64
	// MaxBufferedBytes bounds, per rank, the bytes of messages from peers
	// received ahead of the receive that asks for them (a message on one
	// channel that arrived before the one a receive on another channel
	// waits for); past it the rank fails and tells its peers. Messages a
	// rank sends itself are not counted. Default 256 MiB.
	MaxBufferedBytes int64
	// Logger: default TCP.Logger, else slog.Default().
	Logger *slog.Logger
}

// AutoDevice selects the device LocalRank modulo the device count.
const AutoDevice = -1

// Defaults of Config.
const (
	DefaultWatchInterval    = 50 * time.Millisecond
	DefaultMaxBufferedBytes = 256 << 20
)

// maxBytesCap bounds MaxMessageBytes and MaxBufferedBytes, so sums of them
// never overflow.
const maxBytesCap = 1 << 40

// ConfigFromEnv is [transport.ConfigFromEnv] for the NCCL transport: the
// control connection of the rank e describes, its local rank, and
// AutoDevice. The libraries come from PPGEN_CUDART_LIB and PPGEN_NCCL_LIB
// when set.
func ConfigFromEnv(e launch.Env, fingerprint string) Config {
	return Config{TCP: transport.ConfigFromEnv(e, fingerprint), Device: AutoDevice, LocalRank: e.LocalRank}
}

func (c *Config) fill() error {
	if c.Device < AutoDevice {
		return fmt.Errorf("device %d: want a CUDA device ordinal >= 0, or AutoDevice (-1)", c.Device)
	}
	if c.LocalRank < 0 {
		return fmt.Errorf("local rank %d < 0", c.LocalRank)
	}
	if c.WatchInterval <= 0 {
		c.WatchInterval = DefaultWatchInterval
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = transport.DefaultMaxFrameBytes
	}
	if c.MaxBufferedBytes <= 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if c.MaxMessageBytes > maxBytesCap || c.MaxBufferedBytes > maxBytesCap {
		return fmt.Errorf("MaxMessageBytes %d or MaxBufferedBytes %d over %d", c.MaxMessageBytes, c.MaxBufferedBytes, int64(maxBytesCap))
	}
	if c.TCP.Timeout <= 0 {
		c.TCP.Timeout = transport.DefaultTimeout
	}
	if c.TCP.RendezvousTimeout <= 0 {
		c.TCP.RendezvousTimeout = transport.DefaultRendezvousTimeout
	}
	if c.Logger == nil {
		c.Logger = c.TCP.Logger
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// ErrNoLibrary is wrapped by the error of Dial when the CUDA runtime or
// NCCL cannot be loaded, ErrNoDevice when no CUDA device is usable, and
// ErrUnsupported on a platform purego cannot call NCCL from.
var (
	ErrNoLibrary   = errors.New("library not available")
	ErrNoDevice    = errors.New("no usable CUDA device")
	ErrUnsupported = errors.New("unsupported platform")
)

// CallError is a CUDA runtime or NCCL call that returned an error code.
type CallError struct {
	Call string // e.g. "ncclCommInitRank"
	Code int    // its cudaError_t or ncclResult_t
	Msg  string // cudaGetErrorString or ncclGetErrorString
	Lib  string // "NCCL libnccl.so.2", "CUDA runtime libcudart.so"
}

func (e *CallError) Error() string {
	return fmt.Sprintf("%s: %s (code %d, %s)", e.Call, e.Msg, e.Code, e.Lib)
}

// The control connection's channels: headers announce messages (Act),
// setup carries the ready reports and the unique id (Grad), and every peer's
// Data channel is watched for the control connection's failure (nothing is
// sent there).
const (
	headerCh = abi.ActChannel
	setupCh  = abi.GradChannel
	watchCh  = abi.DataChannel
)

// header announces a message: its channel, tag, dtype and shape.
type header struct {
	ch    abi.Channel
	tag   transport.Tag
	dt    uint8
	dims  []int
	bytes int64 // payload size
}

// dtype codes in headers.
const (
	dtFloat32 = wire.Float32
	dtFloat64 = wire.Float64
	maxDims   = wire.MaxDims
	hdrMagic  = 0x5047 // first element of every header: 'P' 'G', version 1 of the layout
)

// encodeHeader lays h out as the float64 values sent over the control
// connection: magic, the channel's wire code, dtype, then the dims (every
// value an integer below 2^53, so exact).
func encodeHeader(h header) []float64 {
	v := make([]float64, 3+len(h.dims))
	v[0], v[1], v[2] = hdrMagic, float64(wire.ChannelCode(h.ch)), float64(h.dt)
	for i, d := range h.dims {
		v[3+i] = float64(d)
	}
	return v
}

// decodeHeader validates and decodes a header received with tag: every
// value an integer in range, the shape validated as every transport's is
// (wire.Shape: element size × ∏dims, overflow-checked, at most maxBytes).
// It never panics and allocates at most the dims.
func decodeHeader(tag transport.Tag, v []float64, maxBytes int64) (header, error) {
	if len(v) < 3 || len(v) > 3+maxDims {
		return header{}, fmt.Errorf("header of %d values, want 3 to %d", len(v), 3+maxDims)
	}
	if v[0] != hdrMagic {
		return header{}, fmt.Errorf("header magic %v, want %d (a peer of another version?)", v[0], hdrMagic)
	}
	h := header{tag: tag}
	ch, ok := abi.NoChannel, false
	if v[1] >= 0 && v[1] < wire.Channels && v[1] == math.Trunc(v[1]) {
		ch, ok = wire.ChannelOf(uint8(v[1]))
	}
	if !ok {
		return header{}, fmt.Errorf("header channel %v, want 0 (act), 1 (grad) or 2 (data)", v[1])
	}
	h.ch = ch
	if v[2] != dtFloat32 && v[2] != dtFloat64 {
		return header{}, fmt.Errorf("header dtype %v, want %d (float32) or %d (float64)", v[2], dtFloat32, dtFloat64)
	}
	h.dt = uint8(v[2])
	var dims [maxDims]uint64
	for i, f := range v[3:] {
		if f < 0 || f > float64(maxBytes) || f != math.Trunc(f) {
			return header{}, fmt.Errorf("header dimension %d is %v, want an integer in [0, %d]", i, f, maxBytes)
		}
		dims[i] = uint64(f)
	}
	var err error
	if h.dims, h.bytes, err = wire.Shape(h.dt, dims[:len(v)-3], maxBytes, "MaxMessageBytes"); err != nil {
		return header{}, err
	}
	return h, nil
}
