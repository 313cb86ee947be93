package pipe

import "fmt"

// AllReduce runs ALL_REDUCE: a reduction every rank of the world takes part
// in, which every rank posts in the same order (ppgen's verifier proves it).
// It waits for this rank's posted transfers, then calls Config.AllReduce
// with the step's number in this iteration (0 for the first; Reset starts
// the count again), so the trainer knows which reduction this is; the hook
// does it through runtime/collective on its world, which reaches every
// transport. ppgen's strict model takes the step as a rendezvous of every
// rank after their comm streams drained (docs/internals.md, "Adding a step
// kind"). A -clip program holds one, before OPT_STEP: the hook reduces the
// squares of the gradients to the global norm that OptStep clips by.
//
//go:noinline
func (x *Exec) AllReduce() {
	if x.failedNow() {
		return
	}
	k, n := OpAllReduce, x.reduced
	x.reduced++
	switch {
	case x.batch != nil:
		x.stepFail(k, -1, -1, -1, fmt.Errorf("inside BATCH_BEGIN .. BATCH_END, which holds only transfers (BATCH_END first)"))
		return
	case x.reduceHook == nil:
		x.stepFail(k, -1, -1, -1, fmt.Errorf("reduction %d of the iteration: pipe.Config.AllReduce is nil; the program reduces across ranks here (a -clip program: the gradient norm), so the trainer supplies the reduction", n))
		return
	}
	x.inflight.Wait()
	if x.failedNow() {
		return
	}
	if err := x.reduceHook(n); err != nil {
		x.stepFail(k, -1, -1, -1, fmt.Errorf("reduction %d of the iteration: %w", n, err))
	}
}
