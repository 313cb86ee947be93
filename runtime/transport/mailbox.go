package transport

import (
	"sync"
	"time"

	"github.com/ppgen/ppgen/runtime/internal/wire"
	"gorgonia.org/tensor"
)

type message struct {
	tag  Tag
	t    *tensor.Dense
	size int64 // bytes it occupied on the wire (TCP), for the queue bound
}

// mailbox is a FIFO of messages from one peer on one channel, with a single
// receiver at a time. push never blocks: the TCP reader bounds what it
// pushes (see tcpConn.admit); the in-process transport does not.
type mailbox struct {
	mu     sync.Mutex
	q      []message
	head   int
	closed error         // set once the peer said goodbye; returned when q is empty
	notify chan struct{} // capacity 1: "something changed"
	last   Tag           // tag of the last message popped
	popped bool          // a message was popped (last is set)
	onPop  func(size int64)

	rmu   sync.Mutex // serializes receivers (owns timer)
	timer *time.Timer
}

func newMailbox() *mailbox {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &mailbox{notify: make(chan struct{}, 1), timer: t}
}

func (b *mailbox) wake() {
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

func (b *mailbox) push(m message) {
	b.mu.Lock()
	b.q = append(b.q, m)
	b.mu.Unlock()
	b.wake()
}

// close marks the mailbox as finished: once drained, pop returns err.
func (b *mailbox) close(err error) {
	b.mu.Lock()
	if b.closed == nil {
		b.closed = err
	}
	b.mu.Unlock()
	b.wake()
}

// lastTag returns the tag of the last message received from this mailbox.
func (b *mailbox) lastTag() (Tag, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last, b.popped
}

// pop waits up to timeout for the next message. failed is closed when the
// whole transport fails; failErr then gives the reason. On timeout it
// returns wire.ErrNoProgress.
func (b *mailbox) pop(timeout time.Duration, failed <-chan struct{}, failErr func() error) (message, error) {
	b.rmu.Lock()
	defer b.rmu.Unlock()
	armed := false
	defer func() {
		if armed {
			b.timer.Stop()
		}
	}()
	for {
		select {
		case <-failed:
			return message{}, failErr()
		default:
		}
		b.mu.Lock()
		if b.head < len(b.q) {
			m := b.q[b.head]
			b.q[b.head] = message{}
			b.head++
			b.last, b.popped = m.tag, true
			switch {
			case b.head == len(b.q):
				b.q = b.q[:0]
				b.head = 0
			case b.head >= 64 && 2*b.head >= len(b.q):
				n := copy(b.q, b.q[b.head:])
				clear(b.q[n:])
				b.q = b.q[:n]
				b.head = 0
			}
			b.mu.Unlock()
			if b.onPop != nil {
				b.onPop(m.size)
			}
			return m, nil
		}
		closed := b.closed
		b.mu.Unlock()
		if closed != nil {
			return message{}, closed
		}
		if !armed {
			b.timer.Reset(timeout)
			armed = true
		}
		select {
		case <-b.notify:
		case <-failed:
			return message{}, failErr()
		case <-b.timer.C:
			armed = false
			return message{}, wire.ErrNoProgress
		}
	}
}
