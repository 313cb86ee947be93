package transport

import (
	"fmt"
	"sync"
	"time"

	"gorgonia.org/tensor"
)

type message struct {
	tag Tag
	t   *tensor.Dense
}

// mailbox is an unbounded FIFO of messages from one peer on one channel, with
// a single receiver at a time. Senders never block.
type mailbox struct {
	mu     sync.Mutex
	q      []message
	head   int
	closed error         // set once the peer said goodbye; returned when q is empty
	notify chan struct{} // capacity 1: "something changed"

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

// pending reports how many messages wait in the mailbox.
func (b *mailbox) pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.q) - b.head
}

// pop waits up to timeout for the next message. failed is closed when the
// whole transport fails; failErr then gives the reason. what names the
// operation for the timeout error.
func (b *mailbox) pop(timeout time.Duration, failed <-chan struct{}, failErr func() error, peer int, ch Channel) (message, error) {
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
			return message{}, &PeerError{Peer: peer, Reason: fmt.Sprintf("sent nothing on %s for %v (receive timed out)", ch, timeout), Err: ErrTimeout}
		}
	}
}
