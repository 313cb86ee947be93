package collective

import (
	"fmt"
	"sync"

	"github.com/ppgen/ppgen/runtime/transport"
)

// Pending is a collective started by [Comm.Go]: Wait returns its error.
type Pending struct {
	done chan struct{}
	err  error
}

// Wait blocks until the collective has ended and returns its error. It may
// be called any number of times, from any goroutine.
func (p *Pending) Wait() error {
	<-p.done
	return p.err
}

// Done reports, without blocking, whether the collective has ended.
func (p *Pending) Done() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Async runs the collectives of one Comm in the background, one at a time
// and in the order they were started, so that the members (which start the
// same collectives in the same order) stay matched while the caller goes on
// computing. Start must be called from one goroutine at a time.
type Async struct {
	mu   sync.Mutex
	last *Pending
}

// Go starts f (one or more calls on the Comm) after every collective
// started before it has ended, and returns at once. A panic in f becomes
// its error.
func (a *Async) Go(f func() error) *Pending {
	p := &Pending{done: make(chan struct{})}
	a.mu.Lock()
	prev := a.last
	a.last = p
	a.mu.Unlock()
	go func() {
		defer close(p.done)
		defer func() {
			if r := recover(); r != nil {
				p.err = fmt.Errorf("collective: background collective %w: %v", transport.ErrPanicked, r)
			}
		}()
		if prev != nil {
			<-prev.done
		}
		p.err = f()
	}()
	return p
}

// Wait waits for every collective started so far and returns the error of
// the last one.
func (a *Async) Wait() error {
	a.mu.Lock()
	p := a.last
	a.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Wait()
}
