package pipe

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

// Run runs one iteration of a rank: it resets x, calls fn (a generated RankN
// function, or an Interpret closure), waits for the posted transfers and
// returns the first error. A panic in fn (a Stage's, say) becomes the rank's
// error and aborts its peers. An error returned by fn that x did not record
// is recorded (and aborts the peers) too.
func Run(x *Exec, fn func(*Exec) error) (err error) {
	x.Reset()
	defer func() {
		if r := recover(); r != nil {
			x.Fail(fmt.Errorf("panic: %v\n%s", r, debug.Stack()))
			err = x.Sync()
		}
	}()
	ferr := fn(x)
	if ferr != nil && x.Err() == nil {
		x.Fail(ferr)
	}
	return x.Sync()
}

// RunAll runs one iteration of every rank of an in-process world
// concurrently: fns[r] on xs[r] through Run. It returns the ranks' errors
// joined (nil if all succeeded).
func RunAll(xs []*Exec, fns []func(*Exec) error) error {
	if len(xs) != len(fns) {
		return fmt.Errorf("pipe: RunAll: %d execs but %d rank functions", len(xs), len(fns))
	}
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for r := range xs {
		wg.Go(func() { errs[r] = Run(xs[r], fns[r]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
