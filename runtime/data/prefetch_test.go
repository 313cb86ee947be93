package data

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// noLeak fails t when goroutines started during f are still running a
// second after it.
func noLeak(t *testing.T, f func()) {
	t.Helper()
	before := runtime.NumGoroutine()
	f()
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines before, %d after Close", before, n)
	}
}

// TestPrefetch: the prefetcher's steps equal Sampler.Read's, from any
// first step; Close stops it (mid-stream, twice, before any Next) without
// leaking its goroutine, and Next then returns ErrClosed.
func TestPrefetch(t *testing.T) {
	shards := testShards(t, 4000, 3000)
	s, err := NewSampler(shards, Config{Seed: 1, SeqLen: 31, Batch: 2, Micro: 3, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	noLeak(t, func() {
		for _, opt := range []PrefetchOptions{{}, {Ahead: 1}, {Ahead: 8, MaxBytes: 2 * s.stepBytes()}} {
			p, err := s.Prefetch(1, 5, opt)
			if err != nil {
				t.Fatal(err)
			}
			for step := int64(5); step < 12; step++ {
				got, err := p.Next()
				if err != nil {
					t.Fatal(err)
				}
				want, err := s.Read(step, 1)
				if err != nil {
					t.Fatal(err)
				}
				if got.Step != step || fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("step %d: prefetched %v, read %v", step, got, want)
				}
			}
			p.Close()
			p.Close()
			if _, err := p.Next(); !errors.Is(err, ErrClosed) {
				t.Errorf("Next after Close: %v", err)
			}
		}
		p, err := s.Prefetch(0, 0, PrefetchOptions{Ahead: 3})
		if err != nil {
			t.Fatal(err)
		}
		p.Close() // before any Next, the goroutine blocked on a full channel
	})
	for _, c := range []struct {
		replica int
		from    int64
		opt     PrefetchOptions
		want    string
	}{
		{2, 0, PrefetchOptions{}, "replica 2"},
		{0, -1, PrefetchOptions{}, "step -1"},
		{0, 0, PrefetchOptions{Ahead: -1}, "positive bounds"},
		{0, 0, PrefetchOptions{MaxBytes: 100}, "over the prefetch bound of 100"},
	} {
		if _, err := s.Prefetch(c.replica, c.from, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c, err, c.want)
		}
	}
}

// TestPrefetchError: a read that fails (the shard's file closed under the
// prefetcher) reaches the consumer as Next's error, again on every later
// Next, and the goroutine ends.
func TestPrefetchError(t *testing.T) {
	shards := testShards(t, 4000)
	s, err := NewSampler(shards, Config{Seed: 1, SeqLen: 15, Batch: 2, Micro: 2, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	noLeak(t, func() {
		shards[0].Close()
		p, err := s.Prefetch(0, 0, PrefetchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for range 2 {
			if _, err := p.Next(); err == nil || !strings.Contains(err.Error(), "s0.tok") || !strings.Contains(err.Error(), "step 0") {
				t.Fatalf("Next: %v", err)
			}
		}
	})
}
