package doctable

import (
	"runtime"
	"sync"
	"time"
)

// Measure runs f and returns how long it took and the peak of the Go heap
// (runtime.MemStats.HeapAlloc) sampled every interval while it ran, after a
// GC before it starts: the "time" and "peak memory" columns of the tables of
// in-process cases (a case that runs a process of its own reports that
// process's peak RSS instead).
func Measure(interval time.Duration, f func()) (time.Duration, uint64) {
	var ms runtime.MemStats
	var mu sync.Mutex
	var peak uint64
	sample := func() {
		mu.Lock()
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
		mu.Unlock()
	}
	runtime.GC()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	start := time.Now()
	f()
	took := time.Since(start)
	close(stop)
	<-done
	sample()
	return took, peak
}
