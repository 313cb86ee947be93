package data

import (
	"errors"
	"fmt"
	"sync"
)

// stepBytes is the memory one Step's tokens take.
func (s *Sampler) stepBytes() int64 {
	return int64(s.cfg.Micro) * int64(s.cfg.Batch) * int64(s.cfg.SeqLen+1) * 4
}

// ErrClosed is returned by [Prefetcher.Next] after Close.
var ErrClosed = errors.New("data: prefetcher closed")

// Prefetcher reads one replica's steps ahead on a goroutine: steps from,
// from+1, … in order, at most Ahead steps and MaxBytes of tokens read but
// not yet returned by Next. The first error (a read, a corrupt window) is
// returned by Next in the step's place, and again by every later Next; the
// goroutine stops there. Close stops it and waits for it to return.
type Prefetcher struct {
	out  chan result
	stop chan struct{}
	done chan struct{}
	once sync.Once
	err  error // sticky: the error Next returned, or ErrClosed
}

type result struct {
	step *Step
	err  error
}

// PrefetchOptions bound a Prefetcher: Ahead steps (default 2) and
// MaxBytes of tokens (default 256 MiB), whichever is smaller; at least
// one step is always read ahead, and a step larger than MaxBytes is
// refused.
type PrefetchOptions struct {
	Ahead    int
	MaxBytes int64
}

// Prefetch starts reading replica replica's steps from step from.
func (s *Sampler) Prefetch(replica int, from int64, opt PrefetchOptions) (*Prefetcher, error) {
	if replica < 0 || replica >= s.cfg.Replicas || from < 0 {
		return nil, fmt.Errorf("data: prefetch of replica %d from step %d; want replica < %d, step ≥ 0", replica, from, s.cfg.Replicas)
	}
	if opt.Ahead == 0 {
		opt.Ahead = 2
	}
	if opt.MaxBytes == 0 {
		opt.MaxBytes = 256 << 20
	}
	if opt.Ahead < 1 || opt.MaxBytes < 0 {
		return nil, fmt.Errorf("data: prefetch %d steps ahead within %d bytes; want positive bounds", opt.Ahead, opt.MaxBytes)
	}
	per := s.stepBytes()
	if per > opt.MaxBytes {
		return nil, fmt.Errorf("data: a step's tokens take %d bytes, over the prefetch bound of %d", per, opt.MaxBytes)
	}
	ahead := int(min(int64(opt.Ahead), opt.MaxBytes/per))
	// The goroutine holds one step while it waits to send: the channel
	// holds the other ahead-1.
	p := &Prefetcher{out: make(chan result, ahead-1), stop: make(chan struct{}), done: make(chan struct{})}
	go p.run(s, replica, from)
	return p, nil
}

func (p *Prefetcher) run(s *Sampler, replica int, from int64) {
	defer close(p.done)
	for step := from; ; step++ {
		st, err := p.read(s, step, replica)
		select {
		case p.out <- result{st, err}:
		case <-p.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// read is Sampler.Read, a panic turned into an error so that it reaches
// the consumer rather than killing the process.
func (p *Prefetcher) read(s *Sampler, step int64, replica int) (st *Step, err error) {
	defer func() {
		if r := recover(); r != nil {
			st, err = nil, fmt.Errorf("data: reading step %d of replica %d: panic: %v", step, replica, r)
		}
	}()
	return s.Read(step, replica)
}

// Next returns the next step's tokens, waiting for them if need be.
func (p *Prefetcher) Next() (*Step, error) {
	if p.err != nil {
		return nil, p.err
	}
	select {
	case <-p.stop:
		p.err = ErrClosed
		return nil, ErrClosed
	default:
	}
	select {
	case r := <-p.out:
		if r.err != nil {
			p.err = r.err
		}
		return r.step, r.err
	case <-p.stop:
		p.err = ErrClosed
		return nil, ErrClosed
	}
}

// Close stops the goroutine and waits for it; the steps read ahead are
// dropped. It is safe to call more than once and from another goroutine
// than the consumer's; Next returns ErrClosed after it (one goroutine
// calls Next).
func (p *Prefetcher) Close() error {
	p.once.Do(func() { close(p.stop) })
	<-p.done
	return nil
}
