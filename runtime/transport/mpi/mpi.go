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
	"time"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/nap"
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

// mpiOp is one message in flight: a send (header and payload) or a
// receive (header, then payload). Its buffers stay allocated or pinned
// until both requests completed; an op abandoned on failure is leaked
// (kept pinned for ever), because MPI may still write to it.
type mpiOp struct {
	peer   int
	ch     abi.Channel
	send   bool
	tag    transport.Tag // send: the tag sent; receive: the tag received
	hdr    cbuf
	hreq   *C.MPI_Request // C memory (newRequest), freed by release
	preq   *C.MPI_Request
	state  uint8 // receive: 0 header posted, 1 payload posted, 2 done; send: 1 posted, 2 done
	hdone  bool  // send: header completed
	pdone  bool  // payload completed
	pay    cbuf  // buffered send: the copy of the payload
	pin    runtime.Pinner
	pinned bool
	h      mpiHeader     // receive: the decoded header
	t      *tensor.Dense // receive: the tensor being filled
}

// newRequest allocates an MPI request handle in C memory: a cgo call may
// not receive a pointer into a Go object that holds Go pointers.
func newRequest() *C.MPI_Request { return C.ppg_new_request() }

// newOp returns an op with its two request handles allocated.
func newOp(peer int, ch abi.Channel, send bool) *mpiOp {
	return &mpiOp{peer: peer, ch: ch, send: send, hreq: newRequest(), preq: newRequest()}
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
	if op.pay.p != nil {
		op.pay.free()
		op.pay.p = nil
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

	mu      sync.Mutex
	pending []*mpiOp // buffered sends in flight (and abort news)
	last    [][wire.ChannelSlots]*transport.Tag

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

// Polling: a wait spins spinRounds times yielding the goroutine, then
// sleeps between tests, the sleep growing from 1 µs to maxPollSleep, so
// that a waiting rank costs little CPU and still sees a completion within
// about maxPollSleep.
const (
	spinRounds   = 64
	maxPollSleep = 100 * time.Microsecond
)

// poll calls step until it reports done or an error, the transport fails
// (then the failure), or Timeout passes without step reporting done
// (errNoProgress).
func (t *mpiT) poll(step func() (bool, error)) error {
	return t.pollProgress(func(*time.Time) (bool, error) { return step() })
}

// pollProgress is poll whose step may push the deadline back: a batch
// whose ops complete one by one is making progress.
func (t *mpiT) pollProgress(step func(deadline *time.Time) (bool, error)) error {
	deadline := time.Now().Add(t.cfg.Timeout)
	sleep := time.Duration(0)
	for i := 0; ; i++ {
		done, err := step(&deadline)
		if err != nil || done {
			return err
		}
		if t.isFailed() {
			return t.err
		}
		if time.Now().After(deadline) {
			return wire.ErrNoProgress
		}
		if i < spinRounds {
			runtime.Gosched()
			continue
		}
		sleep = min(max(2*sleep, time.Microsecond), maxPollSleep)
		nap.Sleep(sleep) // time.Sleep would round it up to ~1 ms
	}
}

// lastTag returns the last tag received from peer on ch, nil if none.
func (t *mpiT) lastTag(peer int, ch abi.Channel) *transport.Tag {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last[peer][ch]
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

// startSend posts the header and payload of x, tagged tag, to peer on ch:
// a synchronous send (Sync) pins the tensor's backing array, a buffered one
// copies it into C memory.
func (t *mpiT) startSend(peer int, ch abi.Channel, tag transport.Tag, x *tensor.Dense) (*mpiOp, error) {
	v, err := wire.PayloadOf(x)
	if err != nil {
		return nil, err
	}
	if int64(len(v.Raw)) > t.cfg.MaxMessageBytes {
		return nil, fmt.Errorf("%w: %d-byte tensor of shape %v over the %d-byte cap (mpi.Config.MaxMessageBytes)", transport.ErrFrameTooLarge, len(v.Raw), v.Dims, t.cfg.MaxMessageBytes)
	}
	op := newOp(peer, ch, true)
	op.tag, op.hdr, op.state = tag, newCbuf(mpiHeaderLen), 1
	encodeMPIHeader(op.hdr.bytes(), tag, v)
	var buf unsafe.Pointer
	switch {
	case len(v.Raw) == 0:
	case t.cfg.Sync:
		op.pin.Pin(&v.Raw[0])
		op.pinned = true
		buf = unsafe.Pointer(&v.Raw[0])
	default:
		op.pay = newCbuf(len(v.Raw))
		copy(op.pay.bytes(), v.Raw)
		buf = op.pay.p
	}
	sync := C.int(0)
	if t.cfg.Sync {
		sync = 1
	}
	if code := C.ppg_isend(op.hdr.p, C.int(mpiHeaderLen), C.int(peer), C.int(mpiTag(ch, 0)), sync, op.hreq); code != C.MPI_SUCCESS {
		op.release()
		return nil, mpiError("MPI_Isend (header)", code)
	}
	if code := C.ppg_isend(buf, C.int(len(v.Raw)), C.int(peer), C.int(mpiTag(ch, 1)), sync, op.preq); code != C.MPI_SUCCESS {
		t.leak(op) // the header is in flight
		return nil, mpiError("MPI_Isend (payload)", code)
	}
	runtime.KeepAlive(v.Keep)
	return op, nil
}

// testSend advances a send; true once both of its messages completed.
func (t *mpiT) testSend(op *mpiOp) (bool, error) {
	var err error
	if !op.hdone {
		if op.hdone, _, _, err = t.test(op.hreq, "MPI_Test (header send)"); err != nil {
			return false, err
		}
	}
	if !op.pdone {
		if op.pdone, _, _, err = t.test(op.preq, "MPI_Test (payload send)"); err != nil {
			return false, err
		}
	}
	if op.hdone && op.pdone {
		op.state = 2
		op.release()
		return true, nil
	}
	return false, nil
}

// startRecv posts the receive of a header from peer on ch.
func (t *mpiT) startRecv(peer int, ch abi.Channel) (*mpiOp, error) {
	op := newOp(peer, ch, false)
	op.hdr = newCbuf(mpiHeaderLen)
	if code := C.ppg_irecv(op.hdr.p, C.int(mpiHeaderLen), C.int(peer), C.int(mpiTag(ch, 0)), op.hreq); code != C.MPI_SUCCESS {
		op.release()
		return nil, mpiError("MPI_Irecv (header)", code)
	}
	return op, nil
}

// testRecv advances a receive: once its header arrived (and post allows
// it) it posts the payload's receive into a new tensor; true once that
// completed too. A batch holds back post for a receive whose predecessor on
// the same (peer, channel) has not posted its payload yet, so payloads
// match their headers.
func (t *mpiT) testRecv(op *mpiOp, post bool) (bool, error) {
	if op.state == 0 {
		if !post {
			return false, nil
		}
		done, n, _, err := t.test(op.hreq, "MPI_Test (header receive)")
		if err != nil || !done {
			return false, err
		}
		if op.h, err = decodeMPIHeader(op.hdr.bytes()[:min(n, mpiHeaderLen)], t.cfg.MaxMessageBytes); err == nil && n != mpiHeaderLen {
			err = fmt.Errorf("%w: sent a header of %d bytes, want %d", transport.ErrProtocol, n, mpiHeaderLen)
		}
		if err != nil {
			return false, err
		}
		op.hdr.free()
		op.hdr.p = nil
		op.tag = op.h.tag
		var raw []byte
		op.t, raw = wire.Alloc(op.h.dt, op.h.dims)
		var buf unsafe.Pointer
		if len(raw) > 0 {
			op.pin.Pin(&raw[0])
			op.pinned = true
			buf = unsafe.Pointer(&raw[0])
		}
		if code := C.ppg_irecv(buf, C.int(len(raw)), C.int(op.peer), C.int(mpiTag(op.ch, 1)), op.preq); code != C.MPI_SUCCESS {
			return false, mpiError("MPI_Irecv (payload)", code)
		}
		op.state = 1
	}
	if op.state == 1 {
		done, n, _, err := t.test(op.preq, "MPI_Test (payload receive)")
		if err != nil || !done {
			return false, err
		}
		op.release()
		if int64(n) != op.h.n {
			return false, fmt.Errorf("%w: sent a payload of %d bytes after a header of shape %v (%d bytes)", transport.ErrProtocol, n, op.h.dims, op.h.n)
		}
		op.state = 2
		t.mu.Lock()
		tag := op.tag
		t.last[op.peer][op.ch] = &tag
		t.mu.Unlock()
	}
	return op.state == 2, nil
}

func (t *mpiT) Send(peer int, ch abi.Channel, tag transport.Tag, x *tensor.Dense) error {
	if err := transport.CheckPeer(t.rank, t.world, peer, ch); err != nil {
		return fmt.Errorf("transport: rank %d: send %s: %w", t.rank, ch, err)
	}
	if err := t.usable(); err != nil {
		return transport.SendError(t.rank, ch, peer, err)
	}
	op, err := t.startSend(peer, ch, tag, x)
	if err != nil {
		t.fail(transport.SendError(t.rank, ch, peer, err))
		return transport.SendError(t.rank, ch, peer, err)
	}
	if !t.cfg.Sync {
		t.mu.Lock()
		t.pending = append(t.pending, op)
		t.mu.Unlock()
		return nil
	}
	err = t.poll(func() (bool, error) { return t.testSend(op) })
	if err == nil {
		return nil
	}
	t.leak(op)
	if errors.Is(err, wire.ErrNoProgress) {
		note := fmt.Sprintf("synchronous send (mpi.Config.Sync) of %v: rank %d has not started the matching receive", tag, peer)
		if op.hdone {
			note = fmt.Sprintf("synchronous send (mpi.Config.Sync) of %v: rank %d took the header, the payload did not complete", tag, peer)
		}
		pe := transport.NewProgressError(t.rank, "send", peer, ch, t.cfg.Timeout, t.setting, nil, note)
		t.fail(pe)
		return pe
	}
	t.fail(transport.SendError(t.rank, ch, peer, err))
	return transport.SendError(t.rank, ch, peer, err)
}

func (t *mpiT) Recv(peer int, ch abi.Channel) (transport.Tag, *tensor.Dense, error) {
	if err := transport.CheckPeer(t.rank, t.world, peer, ch); err != nil {
		return transport.Tag{}, nil, fmt.Errorf("transport: rank %d: recv %s: %w", t.rank, ch, err)
	}
	if err := t.usable(); err != nil {
		return transport.Tag{}, nil, transport.RecvError(t.rank, ch, peer, err)
	}
	op, err := t.startRecv(peer, ch)
	if err == nil {
		err = t.poll(func() (bool, error) { return t.testRecv(op, true) })
	}
	if err == nil {
		return op.tag, op.t, nil
	}
	if op != nil {
		t.leak(op)
	}
	if errors.Is(err, wire.ErrNoProgress) {
		note := ""
		if op.state == 1 {
			note = fmt.Sprintf("the header of %v arrived, its payload did not", op.tag)
		}
		pe := transport.NewProgressError(t.rank, "recv", peer, ch, t.cfg.Timeout, t.setting, t.lastTag(peer, ch), note)
		t.fail(pe)
		return transport.Tag{}, nil, pe
	}
	t.fail(transport.RecvError(t.rank, ch, peer, err))
	return transport.Tag{}, nil, transport.RecvError(t.rank, ch, peer, err)
}

// Batch starts every op (sends first, then the receives' headers), then
// polls them all until every one completed, bounded by Timeout without any
// completing. A buffered send (not Sync) is handed over like Send's: the
// batch waits for its receives and synchronous sends.
func (t *mpiT) Batch(ops []transport.BatchOp) error {
	if err := t.usable(); err != nil {
		return fmt.Errorf("transport: rank %d: batch: %w", t.rank, err)
	}
	mops := make([]*mpiOp, len(ops))
	fail := func(i int, err error) error {
		for _, op := range mops {
			if op != nil && op.state != 2 {
				t.leak(op)
			}
		}
		err = fmt.Errorf("batch op %d (%s): %w", i, &ops[i], err)
		t.fail(err)
		return err
	}
	for i := range ops {
		op := &ops[i]
		if err := transport.CheckPeer(t.rank, t.world, op.Peer, op.Ch); err != nil {
			return fmt.Errorf("transport: rank %d: batch op %d (%s): %w", t.rank, i, op, err)
		}
	}
	for i := range ops {
		if op := &ops[i]; op.Send {
			m, err := t.startSend(op.Peer, op.Ch, op.Tag, op.T)
			if err != nil {
				return fail(i, transport.SendError(t.rank, op.Ch, op.Peer, err))
			}
			if !t.cfg.Sync {
				t.mu.Lock()
				t.pending = append(t.pending, m)
				t.mu.Unlock()
				continue
			}
			mops[i] = m
		}
	}
	for i := range ops {
		if op := &ops[i]; !op.Send {
			m, err := t.startRecv(op.Peer, op.Ch)
			if err != nil {
				return fail(i, transport.RecvError(t.rank, op.Ch, op.Peer, err))
			}
			mops[i] = m
		}
	}
	type key struct {
		peer int
		ch   abi.Channel
	}
	var failedAt int // the op that failed, or the first one still waiting
	err := t.pollProgress(func(deadline *time.Time) (bool, error) {
		all := true
		failedAt = -1
		var held map[key]bool // (peer, channel) with a receive still waiting for its header
		for i, m := range mops {
			if m == nil || m.state == 2 {
				continue
			}
			var done bool
			var err error
			if m.send {
				done, err = t.testSend(m)
			} else {
				k := key{m.peer, m.ch}
				post := !held[k]
				was := m.state
				done, err = t.testRecv(m, post)
				if m.state == 0 {
					if held == nil {
						held = map[key]bool{}
					}
					held[k] = true
				} else if m.state != was {
					*deadline = time.Now().Add(t.cfg.Timeout)
				}
			}
			if err != nil {
				failedAt = i
				return false, err
			}
			if done {
				*deadline = time.Now().Add(t.cfg.Timeout)
			} else if all {
				all = false
				failedAt = i
			}
		}
		return all, nil
	})
	failedAt = max(failedAt, 0)
	if err == nil {
		for i, m := range mops {
			if m != nil && !m.send {
				ops[i].Tag, ops[i].T = m.tag, m.t
			}
		}
		return nil
	}
	if errors.Is(err, wire.ErrNoProgress) {
		op := &ops[failedAt]
		kind, note := "recv", fmt.Sprintf("batch op %d of %d (%s), the first not complete", failedAt, len(ops), op)
		var last *transport.Tag
		if op.Send {
			kind = "send"
			note += fmt.Sprintf(": synchronous send (mpi.Config.Sync): rank %d has not started the matching receive", op.Peer)
		} else {
			last = t.lastTag(op.Peer, op.Ch)
		}
		pe := transport.NewProgressError(t.rank, kind, op.Peer, op.Ch, t.cfg.Timeout, t.setting, last, note)
		fail(failedAt, pe)
		return pe
	}
	return fail(failedAt, err)
}
