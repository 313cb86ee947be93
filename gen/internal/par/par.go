// Package par runs per-rank work of the compiler's passes and verifier on a
// few goroutines. Callers write only the state of the rank they are given
// (or per-rank result slots), so results do not depend on the schedule of
// the goroutines and stay byte-identical to a serial run.
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// MinSteps is the program size (in steps) from which Workers uses more than
// one goroutine: smaller programs are faster serially. Tests set it to 0 to
// exercise the parallel paths on small programs.
var MinSteps = 1 << 14

// Workers returns how many goroutines ForRanksW should use for P ranks and
// a program of n steps.
func Workers(P, n int) int {
	if n < MinSteps {
		return 1
	}
	return max(1, min(runtime.GOMAXPROCS(0), P))
}

// ForRanks runs f(r) for every rank r < P, in parallel when the program of
// n steps is big enough.
func ForRanks(P, n int, f func(r int)) {
	ForRanksW(Workers(P, n), P, func(_, r int) { f(r) })
}

// ForRanksW runs f(w, r) for every rank r < P on w goroutines; w (in
// 0..w-1) names the goroutine, for per-worker scratch.
func ForRanksW(w, P int, f func(w, r int)) {
	if w <= 1 {
		for r := range P {
			f(0, r)
		}
		return
	}
	var next atomic.Int32
	work := func(id int) {
		for {
			r := int(next.Add(1)) - 1
			if r >= P {
				return
			}
			f(id, r)
		}
	}
	var wg sync.WaitGroup
	for id := 1; id < w; id++ {
		wg.Go(func() { work(id) })
	}
	work(0)
	wg.Wait()
}

// Resize returns s with length n, reusing its memory when it is large
// enough (for the buffers a pass or the verifier keeps in a sync.Pool from
// one program to the next); the contents are not cleared.
func Resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
