//go:build mpi

package mpi

/*
#include <stdlib.h>
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
)

// Built reports whether this build has the MPI transport (the mpi build
// tag). Without it, [New] returns [ErrNotBuilt].
const Built = true

// mpiProc is the process's MPI state: MPI can be initialized and finalized
// once per process, from one thread (the "main thread" of the MPI
// standard), which a goroutine locked to its OS thread plays.
var mpiProc struct {
	sync.Mutex
	started   bool // New was called (MPI cannot be started twice)
	finalize  chan chan error
	already   bool // MPI was initialized by someone else: do not finalize it
	rank, wld int
}

// mpiInit initializes MPI with MPI_THREAD_MULTIPLE on a locked OS thread,
// which then waits to finalize it.
func mpiInit() error {
	mpiProc.Lock()
	defer mpiProc.Unlock()
	if mpiProc.started {
		return errors.New("MPI was already started (and perhaps finalized) in this process: one MPI transport per process")
	}
	mpiProc.started = true
	// OpenMPI installs handlers for SIGSEGV, SIGBUS, SIGFPE and SIGABRT
	// that print its own backtrace; they would replace the Go runtime's
	// (a nil dereference must stay a Go panic). An empty opal_signal keeps
	// the Go handlers; a user setting wins.
	if _, ok := os.LookupEnv("OMPI_MCA_opal_signal"); !ok {
		os.Setenv("OMPI_MCA_opal_signal", "")
	}
	res := make(chan error)
	mpiProc.finalize = make(chan chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread stays MPI's main thread
		var provided, rank, size, already C.int
		code := C.ppg_init(&provided, &rank, &size, &already)
		mpiProc.already = already != 0
		switch {
		case code != C.MPI_SUCCESS:
			res <- fmt.Errorf("MPI_Init_thread: %s", mpiErrString(code))
			return
		case provided < C.ppg_thread_multiple():
			// Symmetric on every rank: finalize so the job ends cleanly.
			if !mpiProc.already {
				C.MPI_Finalize()
			}
			res <- fmt.Errorf("the MPI library provides thread level %d, not MPI_THREAD_MULTIPLE (%d), which the transport needs (sends and receives run on several goroutines): use an MPI built with thread support (OpenMPI >= 3 and MPICH have it by default)",
				int(provided), int(C.ppg_thread_multiple()))
			return
		}
		mpiProc.rank, mpiProc.wld = int(rank), int(size)
		res <- nil
		done := <-mpiProc.finalize
		if code := C.ppg_finalize(already); code != C.MPI_SUCCESS {
			done <- fmt.Errorf("MPI_Finalize: %s", mpiErrString(code))
			return
		}
		done <- nil
	}()
	return <-res
}

// mpiFinalize finalizes MPI on the thread that initialized it.
func mpiFinalize() error {
	done := make(chan error)
	mpiProc.finalize <- done
	return <-done
}

// mpiErrText is MPI's message of an error code (MPI_Error_string), only
// to the length MPI reports.
func mpiErrText(code C.int) string {
	buf := make([]byte, int(C.ppg_max_error_string())+1)
	var n C.int
	C.ppg_error_string(code, (*C.char)(unsafe.Pointer(&buf[0])), &n)
	if n <= 0 || int(n) > len(buf) {
		return "unknown MPI error"
	}
	return string(buf[:n])
}

func mpiErrString(code C.int) string {
	return fmt.Sprintf("%s (MPI error %d)", mpiErrText(code), int(code))
}

// mpiError is the error of a failed MPI call: an *Error.
func mpiError(call string, code C.int) error {
	e := &Error{Call: call, Code: int(code), Class: int(C.ppg_error_class(code)), Message: mpiErrText(code)}
	if e.Class == int(C.ppg_err_truncate()) {
		e.Hint = truncateHint
	}
	return e
}

// cbuf is a C-allocated buffer of n bytes (at least 1 allocated), which MPI
// may keep using after the cgo call returns.
type cbuf struct {
	p unsafe.Pointer
	n int
}

func newCbuf(n int) cbuf { return cbuf{C.malloc(C.size_t(max(n, 1))), n} }

func (b cbuf) bytes() []byte { return unsafe.Slice((*byte)(b.p), b.n) }
func (b cbuf) free()         { C.free(b.p) }

// mpiOp is a send in flight (header, with the payload inline or
// followed by it), abort news, or a collective (coll.go). Its buffers stay
// allocated or pinned until its requests completed; an op abandoned on
// failure is leaked (kept pinned for ever), because MPI may still use
// them.
type mpiOp struct {
	peer     int
	ch       abi.Channel
	tag      transport.Tag
	hdr      cbuf           // the header, and the payload when inline
	hreq     *C.MPI_Request // C memory (newRequest), freed by release
	preq     *C.MPI_Request
	hdone    bool // header completed
	pdone    bool // payload completed (or inline, or none)
	windowed bool // a marker, counted in mpiT.sendsTo (markEvery)
	pooled   bool // a send op whose buffers go back to mpiT.freeOps
	pin      runtime.Pinner
	pinned   bool
}

// newRequest allocates an MPI request handle in C memory: a cgo call may
// not receive a pointer into a Go object that holds Go pointers.
func newRequest() *C.MPI_Request { return C.ppg_new_request() }

// newOp returns an op with its two request handles allocated.
func newOp(peer int, ch abi.Channel) *mpiOp {
	return &mpiOp{peer: peer, ch: ch, hreq: newRequest(), preq: newRequest()}
}

// release frees or unpins op's buffers once MPI is done with them.
func (op *mpiOp) release() {
	if op.hreq != nil {
		C.free(unsafe.Pointer(op.hreq))
		C.free(unsafe.Pointer(op.preq))
		op.hreq, op.preq = nil, nil
	}
	if op.hdr.p != nil {
		op.hdr.free()
		op.hdr.p = nil
	}
	if op.pinned {
		op.pin.Unpin()
		op.pinned = false
	}
}

// mpiLeaked holds the ops abandoned on failure (under their transport's
// mu) for the life of the process: MPI may still use their buffers, and a
// runtime.Pinner that the GC finds unreachable while pinning panics.
var mpiLeaked []*mpiOp

// mpiT is one rank's endpoint over MPI (New).
type mpiT struct {
	cfg         Config
	rank, world int
	setting     string

	failOnce sync.Once
	failed   chan struct{}
	err      error // set before failed is closed
	closed   atomic.Bool
	aborting atomic.Bool
	waiters  atomic.Int32 // goroutines in pollLoop

	mu      sync.Mutex
	pending []*mpiOp // buffered sends in flight (and abort news)
	sendsTo []int    // unmatched markers per peer (markEvery)
	// npending is len(pending), read without mu.
	npending atomic.Int32

	opsMu   sync.Mutex
	freeOps []*mpiOp // completed send ops, for reuse (sendOp)

	smu     sync.Mutex // orders a message's header and payload sends
	sendSeq []uint32   // under smu: small buffered sends per (peer, channel), for markEvery

	rmu  sync.Mutex // the receiving side (recv.go)
	rx   receiver
	last [][wire.ChannelSlots]*transport.Tag // under rmu

	news    cbuf
	newsReq *C.MPI_Request // C memory

	groupMu sync.Mutex  // serializes NewGroup (coll.go)
	groups  []*mpiGroup // the collectives' communicators, freed by Close

	stop, stopped chan struct{}
}

// New starts the MPI transport: it initializes MPI with
// MPI_THREAD_MULTIPLE (refused when the library cannot provide it), takes
// the rank and world size from MPI_COMM_WORLD, and compares the schedule
// fingerprint across all ranks, refusing to start (on every rank) when
// they differ, naming the ranks. MPI can be started once per process, so
// one transport per process; Close finalizes MPI.
//
// The transport is FIFO per (peer, channel) by MPI tag; see
// docs/internals.md, "The MPI transport", for the message format, the
// pinning of buffers, the synchronous mode and the abort.
func New(cfg Config) (transport.Transport, error) {
	if err := cfg.fill(); err != nil {
		return nil, fmt.Errorf("transport: MPI: %w", err)
	}
	if err := mpiInit(); err != nil {
		return nil, fmt.Errorf("transport: MPI: %w", err)
	}
	t := &mpiT{cfg: cfg, rank: mpiProc.rank, world: mpiProc.wld, setting: "PPGEN_TIMEOUT (mpi.Config.Timeout)",
		failed: make(chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{})}
	t.last = make([][wire.ChannelSlots]*transport.Tag, t.world)
	t.sendsTo = make([]int, t.world)
	t.sendSeq = make([]uint32, t.world*wire.Channels)
	if err := t.checkFingerprint(); err != nil {
		if !errors.Is(err, transport.ErrTimeout) {
			mpiFinalize() // every rank saw the same allgather and fails alike
		}
		return nil, err
	}
	// Abort news from any peer.
	t.news, t.newsReq = newCbuf(mpiNewsLen), newRequest()
	if code := C.ppg_irecv(t.news.p, C.int(mpiNewsLen), -1, C.int(mpiAbortTag), t.newsReq); code != C.MPI_SUCCESS {
		return nil, fmt.Errorf("transport: rank %d: %w", t.rank, mpiError("MPI_Irecv (abort news)", code))
	}
	if err := t.startReceiver(); err != nil {
		return nil, fmt.Errorf("transport: rank %d: %w", t.rank, err)
	}
	go t.progress()
	return t, nil
}

func (t *mpiT) Rank() int  { return t.rank }
func (t *mpiT) World() int { return t.world }

// Fingerprint returns the schedule fingerprint every rank agreed on.
func (t *mpiT) Fingerprint() string { return t.cfg.Fingerprint }

// checkFingerprint allgathers a fixed-size record (a SHA-256 of the
// fingerprint, its first bytes and the schedule's description, for the
// message) and compares.
func (t *mpiT) checkFingerprint() error {
	const prefix = 64
	const rec = sha256.Size + prefix + transport.MaxScheduleLen
	send, recv := newCbuf(rec), newCbuf(rec*t.world)
	sum := sha256.Sum256([]byte(t.cfg.Fingerprint))
	b := send.bytes()
	clear(b)
	copy(b, sum[:])
	copy(b[sha256.Size:sha256.Size+prefix], t.cfg.Fingerprint)
	copy(b[sha256.Size+prefix:], t.cfg.Schedule)
	req := newRequest()
	if code := C.ppg_iallgather(send.p, C.int(rec), recv.p, req); code != C.MPI_SUCCESS {
		return fmt.Errorf("transport: rank %d: %w", t.rank, mpiError("MPI_Iallgather (schedule fingerprint)", code))
	}
	err := t.poll(func() (bool, error) {
		done, _, _, err := t.test(req, "MPI_Iallgather (schedule fingerprint)")
		return done, err
	})
	if errors.Is(err, wire.ErrNoProgress) {
		// Leak the buffers: the collective may still complete into them.
		return fmt.Errorf("transport: rank %d: %w: not every rank reached the start (the fingerprint allgather) within %v (%s); are all ranks started, with the MPI transport?",
			t.rank, transport.ErrTimeout, t.cfg.Timeout, t.setting)
	}
	defer send.free()
	defer recv.free()
	defer C.free(unsafe.Pointer(req))
	if err != nil {
		return err
	}
	all := recv.bytes()
	groups := map[string][]int{}
	var keys []string
	for r := range t.world {
		rb := all[r*rec : (r+1)*rec]
		k := string(rb[:sha256.Size])
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	if len(keys) == 1 {
		return nil
	}
	sort.Slice(keys, func(i, j int) bool { return groups[keys[i]][0] < groups[keys[j]][0] })
	var parts []string
	for _, k := range keys {
		rs := groups[k]
		r0 := rs[0]
		rb := all[r0*rec : (r0+1)*rec]
		fp := strings.TrimRight(string(rb[sha256.Size:sha256.Size+prefix]), "\x00")
		part := fmt.Sprintf("%s %q", rankList(rs), fp)
		// A peer's bytes are printed only when they are what a valid
		// Schedule is (fill checked ours).
		if sched := strings.TrimRight(string(rb[sha256.Size+prefix:]), "\x00"); sched != "" && wire.Printable(sched) {
			part += " (schedule " + sched + ")"
		}
		parts = append(parts, part)
	}
	return fmt.Errorf("transport: rank %d: %w: the ranks run different schedules (fingerprints differ): %s; %s",
		t.rank, transport.ErrHandshake, strings.Join(parts, ", "), wire.SameScheduleHelp)
}

// rankList is "rank 3" or "ranks 0, 1, 2".
func rankList(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	if len(rs) == 1 {
		return "rank " + s[0] + " has"
	}
	return "ranks " + strings.Join(s, ", ") + " have"
}

func (t *mpiT) fail(err error) {
	t.failOnce.Do(func() {
		t.err = err
		close(t.failed)
	})
}

func (t *mpiT) isFailed() bool {
	select {
	case <-t.failed:
		return true
	default:
		return false
	}
}

// test tests one request; done reports completion, with the received byte
// count and source.
func (t *mpiT) test(req *C.MPI_Request, call string) (done bool, count, source int, err error) {
	var d, n, src C.int
	if code := C.ppg_test(req, &d, &n, &src); code != C.MPI_SUCCESS {
		return false, 0, 0, mpiError(call, code)
	}
	return d != 0, int(n), int(src), nil
}

// leak keeps op alive for ever: MPI may still use its buffers.
func (t *mpiT) leak(op *mpiOp) {
	t.mu.Lock()
	mpiLeaked = append(mpiLeaked, op)
	t.mu.Unlock()
}

// usable returns the error that refuses a new operation, if any.
func (t *mpiT) usable() error {
	if t.isFailed() {
		return t.err
	}
	if t.closed.Load() {
		return transport.ErrClosed
	}
	return nil
}
