//go:build linux && (amd64 || arm64)

package nccl

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/transport"
)

// opError is the error of an operation on this rank: "transport: rank R:
// send act to rank P: ...".
func (t *Transport) opError(send bool, ch abi.Channel, peer int, err error) error {
	if send {
		return transport.SendError(t.rank, ch, peer, err)
	}
	return transport.RecvError(t.rank, ch, peer, err)
}

func (t *Transport) checkOp(peer int, ch abi.Channel) error {
	if peer < 0 || peer >= t.world {
		return fmt.Errorf("peer rank %d out of range [0, %d)", peer, t.world)
	}
	if !wire.ValidChannel(ch) {
		return fmt.Errorf("unknown channel %d", uint8(ch))
	}
	return nil
}

// Send hands x, tagged tag, to peer on ch and waits until peer took it
// (NCCL's rendezvous). A send to this rank is delivered at once.
func (t *Transport) Send(peer int, ch abi.Channel, tag transport.Tag, x *tensor.Dense) error {
	ops := []transport.BatchOp{{Peer: peer, Ch: ch, Send: true, Tag: tag, T: x}}
	return t.batch(ops, true)
}

// Recv waits (bounded by the progress timeout) for the next message from
// peer on ch. The returned tensor is freshly allocated.
func (t *Transport) Recv(peer int, ch abi.Channel) (transport.Tag, *tensor.Dense, error) {
	ops := []transport.BatchOp{{Peer: peer, Ch: ch}}
	if err := t.batch(ops, true); err != nil {
		return transport.Tag{}, nil, err
	}
	return ops[0].Tag, ops[0].T, nil
}

// Batch runs ops as one NCCL group (see the package doc): every send's
// header goes out first, then one group issues every payload; a receive
// that must first take a message of another channel from its peer splits
// the batch there.
func (t *Transport) Batch(ops []transport.BatchOp) error { return t.batch(ops, false) }

// item is one NCCL send or receive of a group.
type item struct {
	send bool
	peer int
	h    header
	raw  []byte        // send: the payload; receive: the host buffer
	keep *tensor.Dense // the tensor raw belongs to
	op   int           // receive: the op it completes, or -1: to the box of (peer, h.ch)
	off  uintptr       // offset in the arena
}

func (t *Transport) batch(ops []transport.BatchOp, single bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	opErr := func(i int, err error) error {
		op := &ops[i]
		if single {
			return t.opError(op.Send, op.Ch, op.Peer, err)
		}
		return fmt.Errorf("transport: rank %d: batch op %d (%s): %w", t.rank, i, op, err)
	}
	for i := range ops {
		if err := t.checkOp(ops[i].Peer, ops[i].Ch); err != nil {
			return opErr(i, err)
		}
	}
	if t.isFailed() {
		return opErr(0, t.err)
	}
	for ch := range t.selfWant {
		t.selfWant[ch] = t.selfWant[ch][:0]
	}
	// Check everything before the first header leaves: sends' payloads,
	// and that every receive from this rank has a message.
	var items []item
	var self [wire.ChannelSlots]int
	for ch := range self {
		self[ch] = len(t.boxes[t.rank][ch])
	}
	for i := range ops {
		op := &ops[i]
		if !op.Send {
			continue
		}
		if op.Peer != t.rank && t.peerGone[op.Peer].Load() {
			return opErr(i, transport.PeerClosed(op.Peer))
		}
		p, err := payloadOf(op.T, t.cfg.MaxMessageBytes)
		if err != nil {
			return opErr(i, err)
		}
		h := header{ch: op.Ch, tag: op.Tag, dt: p.Dtype, dims: p.Dims, bytes: int64(len(p.Raw))}
		items = append(items, item{send: true, peer: op.Peer, h: h, raw: p.Raw, keep: p.Keep, op: i})
		if op.Peer == t.rank {
			self[op.Ch]++
		}
	}
	for i := range ops {
		if op := &ops[i]; !op.Send && op.Peer == t.rank {
			if self[op.Ch] == 0 {
				return opErr(i, fmt.Errorf("nothing was sent to this rank on %s: a receive from this rank itself needs its send first (in the same batch, or before)", op.Ch))
			}
			self[op.Ch]--
		}
	}
	// The headers, in op order (NCCL's issue order per peer).
	remote := false // a header went to a peer
	for _, it := range items {
		if it.peer == t.rank {
			t.selfq = append(t.selfq, it.h)
			continue
		}
		v := encodeHeader(it.h)
		if err := t.ctl.Send(it.peer, headerCh, it.h.tag, tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))); err != nil {
			if remote {
				// Headers of this batch went to other peers, whose
				// payloads will not follow: the order with them is
				// broken.
				t.failAndTell(err)
			}
			t.selfq = t.selfq[:0]
			return opErr(it.op, err)
		}
		remote = true
	}
	// The receives: from the box, or the next headers of the peer.
	for i := range ops {
		op := &ops[i]
		if op.Send {
			continue
		}
		if m, ok := t.popBox(op.Peer, op.Ch); ok {
			op.Tag, op.T = m.tag, m.t
			continue
		}
		if op.Peer == t.rank {
			t.selfWant[op.Ch] = append(t.selfWant[op.Ch], i) // served by drainSelf
			continue
		}
		for {
			h, err := t.nextHeader(op.Peer, op.Ch)
			if err != nil {
				if len(items) > 0 || len(t.selfq) > 0 {
					// Planned and not issued: sends whose headers went
					// out, or receives whose headers were taken. The
					// order with those peers is lost.
					t.fail(err)
				}
				return opErr(i, err)
			}
			if h.ch == op.Ch {
				items = append(items, t.recvItem(h, op.Peer, i, ops))
				break
			}
			// A message of another channel comes first: it must be
			// received before the peer sends the next header. Issue what
			// is planned so far, with it.
			items = append(items, t.recvItem(h, op.Peer, -1, ops))
			items = t.drainSelf(items, ops)
			if err := t.exec(items, ops); err != nil {
				return opErr(i, err)
			}
			items = items[:0]
		}
	}
	items = t.drainSelf(items, ops)
	if err := t.exec(items, ops); err != nil {
		first := 0
		if len(items) > 0 {
			first = items[0].op
		}
		if first < 0 {
			first = 0
		}
		return opErr(first, err)
	}
	for i := range ops {
		if op := &ops[i]; !op.Send {
			tag := op.Tag
			t.last[op.Peer][op.Ch] = &tag
		}
	}
	return nil
}

// recvItem allocates the host tensor of a receive of h from peer for op (or
// -1: for the box).
func (t *Transport) recvItem(h header, peer, op int, ops []transport.BatchOp) item {
	x, raw := wire.Alloc(h.dt, h.dims) // h was validated (decodeHeader)
	if op >= 0 {
		ops[op].Tag, ops[op].T = h.tag, x
	}
	return item{peer: peer, h: h, raw: raw, keep: x, op: op}
}

// drainSelf adds a receive for every header of a send to self still
// queued (NCCL needs a self send's receive in the same group), in the
// order of the sends: each completes the first receive from self waiting on
// its channel, else goes to the box.
func (t *Transport) drainSelf(items []item, ops []transport.BatchOp) []item {
	for _, h := range t.selfq {
		op := -1
		if w := t.selfWant[h.ch]; len(w) > 0 {
			op, t.selfWant[h.ch] = w[0], w[1:]
		}
		items = append(items, t.recvItem(h, t.rank, op, ops))
	}
	t.selfq = t.selfq[:0]
	return items
}

func (t *Transport) popBox(peer int, ch abi.Channel) (message, bool) {
	b := t.boxes[peer][ch]
	if len(b) == 0 {
		return message{}, false
	}
	m := b[0]
	b[0] = message{}
	t.boxes[peer][ch] = b[1:]
	t.buffered -= m.n
	return m, true
}

// nextHeader waits for peer's next header over the control connection.
func (t *Transport) nextHeader(peer int, ch abi.Channel) (header, error) {
	tag, v, err := t.ctl.Recv(peer, headerCh)
	if err != nil {
		var pe *transport.ProgressError
		if errors.As(err, &pe) {
			return header{}, transport.NewProgressError(t.rank, "recv", peer, ch, pe.Waited, "PPGEN_TIMEOUT", t.last[peer][ch],
				"no message announced over the control connection")
		}
		if !t.ctlFailed(peer, err) || t.isFailed() {
			return header{}, t.err
		}
		t.peerGone[peer].Store(true)
		return header{}, transport.PeerClosed(peer)
	}
	f, ok := v.Data().([]float64)
	if !ok {
		err = fmt.Errorf("header of dtype %v, want float64", v.Dtype())
	}
	var h header
	if err == nil {
		h, err = decodeHeader(tag, f, t.cfg.MaxMessageBytes)
	}
	if err != nil {
		pe := &transport.PeerError{Peer: peer, Reason: "sent a bad message header: " + err.Error(), Err: transport.ErrProtocol}
		t.failAndTell(pe)
		return header{}, pe
	}
	return h, nil
}

// exec runs items as one NCCL group on the stream: the sends' payloads are
// copied to the device, every send and receive is issued between
// ncclGroupStart and ncclGroupEnd, the stream is waited for (bounded by the
// progress timeout), and the receives are copied back to their host
// tensors. Received messages not asked for go to their boxes.
func (t *Transport) exec(items []item, ops []transport.BatchOp) error {
	if len(items) == 0 {
		return nil
	}
	var total uintptr
	nccl := 0
	for i := range items {
		if items[i].h.bytes == 0 {
			continue // shape only: nothing crosses NCCL (both sides know)
		}
		items[i].off = total
		total += (uintptr(items[i].h.bytes) + deviceAlign - 1) &^ (deviceAlign - 1)
		nccl++
	}
	if nccl > 0 {
		if err := t.onDevice(func() error { return t.run(items, total) }); err != nil {
			if !t.isFailed() {
				t.failAndTell(err)
			}
			return errOf(err, t)
		}
	}
	for _, it := range items {
		if it.send || it.op >= 0 {
			continue
		}
		if it.peer != t.rank && t.buffered+it.h.bytes > t.cfg.MaxBufferedBytes {
			err := fmt.Errorf("rank %d sent %d bytes on other channels ahead of the awaited message, over MaxBufferedBytes %d (ranks run different schedules?)",
				it.peer, t.buffered+it.h.bytes, t.cfg.MaxBufferedBytes)
			t.failAndTell(err)
			return err
		}
		t.buffered += it.h.bytes
		t.boxes[it.peer][it.h.ch] = append(t.boxes[it.peer][it.h.ch], message{it.h.tag, it.keep, it.h.bytes})
	}
	return nil
}

// run is exec's device part, for items of total arena bytes, on the
// world's communicator.
func (t *Transport) run(items []item, total uintptr) error {
	l, c := t.lib, t.wc
	if err := t.ensureArena(c, total); err != nil {
		return err
	}
	for _, it := range items {
		if it.send && it.h.bytes > 0 {
			r := l.memcpyH2D(c.arena+it.off, unsafe.Pointer(unsafe.SliceData(it.raw)), uintptr(it.h.bytes), cudaMemcpyHostToDev, c.stream)
			if err := l.cudaErr("cudaMemcpyAsync (host to device)", r); err != nil {
				return err
			}
		}
	}
	if err := t.issue(items); err != nil {
		return err
	}
	if err := t.wait(items); err != nil {
		return err
	}
	for _, it := range items {
		if !it.send && it.h.bytes > 0 {
			r := l.memcpyD2H(unsafe.Pointer(unsafe.SliceData(it.raw)), c.arena+it.off, uintptr(it.h.bytes), cudaMemcpyDevToHost, c.stream)
			if err := l.cudaErr("cudaMemcpyAsync (device to host)", r); err != nil {
				return err
			}
		}
	}
	if err := t.wait(items); err != nil {
		return err
	}
	for _, it := range items {
		runtime.KeepAlive(it.keep)
	}
	return nil
}

// issue calls ncclGroupStart, ncclSend or ncclRecv per item, ncclGroupEnd.
// The group must be closed even when a call failed. ncclGroupEnd may block
// (NCCL connects a pair of ranks at their first group): past the progress
// timeout the transport fails and the communicator is aborted, which ends
// the call.
func (t *Transport) issue(items []item) error {
	l, c := t.lib, t.wc
	pe := t.progressError(items, "ncclGroupEnd did not return")
	return t.issueOn(c, func() { t.fail(pe) }, func() error {
		if err := l.ncclErr("ncclGroupStart", l.ncclGroupStart()); err != nil {
			return err
		}
		var first error
		for _, it := range items {
			if it.h.bytes == 0 {
				continue
			}
			var r int32
			if it.send {
				r = l.ncclSend(c.arena+it.off, uintptr(it.h.bytes), ncclUint8, int32(it.peer), c.handle, c.stream)
			} else {
				r = l.ncclRecv(c.arena+it.off, uintptr(it.h.bytes), ncclUint8, int32(it.peer), c.handle, c.stream)
			}
			if r != ncclSuccess && first == nil {
				call := "ncclRecv"
				if it.send {
					call = "ncclSend"
				}
				first = l.ncclErr(fmt.Sprintf("%s of %d bytes, peer %d", call, it.h.bytes, it.peer), r)
			}
		}
		if err := l.ncclErr("ncclGroupEnd", l.ncclGroupEnd()); err != nil && first == nil {
			first = err
		}
		return first
	})
}

// wait polls the world's stream until its work is done, the transport
// fails, or the progress timeout passes (then the transport fails with a
// *transport.ProgressError naming the first receive of items, else the
// first send).
func (t *Transport) wait(items []item) error {
	return t.waitStream(t.wc, func() error {
		pe := t.progressError(items, "")
		t.fail(pe)
		return pe
	})
}

func (t *Transport) progressError(items []item, note string) *transport.ProgressError {
	pick := -1
	for i, it := range items {
		if it.h.bytes > 0 && (pick < 0 || (!it.send && items[pick].send)) {
			pick = i
		}
	}
	it := items[pick]
	op := "recv"
	if it.send {
		op = "send"
	}
	if note == "" {
		note = "the NCCL operation did not complete"
		if n := len(items); n > 1 {
			note = fmt.Sprintf("the NCCL group of %d operations did not complete", n)
		}
	}
	if t.peerGone[it.peer].Load() {
		note += fmt.Sprintf("; rank %d closed its control connection", it.peer)
	}
	return transport.NewProgressError(t.rank, op, it.peer, it.h.ch, t.cfg.TCP.Timeout, "PPGEN_TIMEOUT", t.last[it.peer][it.h.ch], note)
}
