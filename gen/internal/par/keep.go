package par

import (
	"runtime"
	"sync"
)

// idleCycles is how many GC cycles a Keep holds a value that nobody takes.
const idleCycles = 4

// Keep holds one value of T, a pass's or the verifier's largest buffers,
// from one use to the next: Take hands over the value Put kept last (nil
// when there is none, or while another caller holds it), Put keeps one.
// Unlike a sync.Pool, the value survives the GC cycles that a lowering
// itself triggers (a sync.Pool drops its values after two cycles, and one
// Put on another P's private slot is out of reach, so the verifier's and
// the timed comm order's buffers came back about every other lowering);
// a value nobody takes for idleCycles GC cycles is dropped, so a process
// that stops lowering gives the memory back. The zero Keep is empty.
type Keep[T any] struct {
	mu   sync.Mutex
	v    *T
	idle int // GC cycles since v was kept
	reg  bool
}

// Take returns the kept value and empties the Keep, or nil.
func (k *Keep[T]) Take() *T {
	k.mu.Lock()
	v := k.v
	k.v = nil
	k.mu.Unlock()
	return v
}

// Put keeps v for the next Take (replacing a value kept meanwhile).
func (k *Keep[T]) Put(v *T) {
	k.mu.Lock()
	k.v, k.idle = v, 0
	reg := k.reg
	k.reg = true
	k.mu.Unlock()
	watch(k, !reg)
}

// sweep counts one GC cycle and drops a value idle for idleCycles; it
// reports whether the Keep still holds one.
func (k *Keep[T]) sweep() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.v == nil {
		return false
	}
	if k.idle++; k.idle >= idleCycles {
		k.v = nil
		return false
	}
	return true
}

// The GC clock: a sentinel object whose finalizer runs after each GC cycle
// that finds it unreachable, sweeps every Keep and re-arms itself while one
// still holds a value (so an idle process runs no finalizer at all).
var (
	keepsMu sync.Mutex
	keeps   []interface{ sweep() bool }
	armed   bool
)

type gcSentinel struct{ _ byte } // not zero-sized: a finalizer needs its own allocation

func watch(k interface{ sweep() bool }, register bool) {
	keepsMu.Lock()
	defer keepsMu.Unlock()
	if register {
		keeps = append(keeps, k)
	}
	if !armed {
		armed = true
		runtime.SetFinalizer(new(gcSentinel), onGC)
	}
}

func onGC(s *gcSentinel) {
	keepsMu.Lock()
	defer keepsMu.Unlock()
	held := false
	for _, k := range keeps {
		held = k.sweep() || held
	}
	if held {
		runtime.SetFinalizer(s, onGC)
	} else {
		armed = false
	}
}
