package transport

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/ppgen/ppgen/abi"
	"gorgonia.org/tensor"
)

// poolElems is a float32 tensor size the pool handles (32 KiB).
const poolElems = 8192

func filled32(n int, v float32) *tensor.Dense {
	s := make([]float32, n)
	for i := range s {
		s[i] = v
	}
	return tensor.New(tensor.WithShape(n), tensor.WithBacking(s))
}

// allEqual reports whether every element of t is v.
func allEqual(t *tensor.Dense, v float32) bool {
	for _, e := range t.Float32s() {
		if e != v {
			return false
		}
	}
	return true
}

func dataOf(t *tensor.Dense) unsafe.Pointer {
	switch t.Dtype() {
	case tensor.Float64:
		return unsafe.Pointer(unsafe.SliceData(t.Float64s()))
	}
	return unsafe.Pointer(unsafe.SliceData(t.Float32s()))
}

// recyclingWorlds are the transports that implement Recycler, as pairs.
func recyclingWorlds(t *testing.T) map[string][]Transport {
	return map[string][]Transport{
		"tcp":    asTransports(mustWorld(t, 2, nil)),
		"inproc": NewInProc(2),
	}
}

// TestRecycleNeverAliases receives messages without recycling them (each
// keeps its values), then recycles one twice: the next receive reuses its
// memory, the one after does not (the second Recycle was ignored), and the
// message still held keeps its values.
func TestRecycleNeverAliases(t *testing.T) {
	for name, trs := range recyclingWorlds(t) {
		t.Run(name, func(t *testing.T) {
			defer func() {
				for _, tr := range trs {
					tr.Abort(ErrClosed)
				}
			}()
			rec := trs[1].(Recycler)
			send := func(v float32) {
				t.Helper()
				if err := trs[0].Send(1, abi.ActChannel, Tag{Micro: int32(v)}, filled32(poolElems, v)); err != nil {
					t.Fatal(err)
				}
			}
			recv := func(v float32) *tensor.Dense {
				t.Helper()
				_, x, err := trs[1].Recv(0, abi.ActChannel)
				if err != nil {
					t.Fatal(err)
				}
				if !allEqual(x, v) {
					t.Fatalf("received tensor does not hold %v", v)
				}
				return x
			}
			send(1)
			send(2)
			a, b := recv(1), recv(2)
			if dataOf(a) == dataOf(b) {
				t.Fatal("two received tensors share memory")
			}
			rec.Recycle(a)
			rec.Recycle(a)                      // ignored: already back
			rec.Recycle(filled32(poolElems, 9)) // ignored: not lent
			rec.Recycle(b.ShallowClone())       // ignored: another tensor, same memory
			rec.Recycle(tensor.New(tensor.WithShape(4), tensor.WithBacking(make([]float32, 4))))
			rec.Recycle(nil)
			send(3)
			send(4)
			c, d := recv(3), recv(4)
			if dataOf(c) != dataOf(a) {
				t.Error("the receive after Recycle did not reuse the recycled memory")
			}
			if dataOf(d) == dataOf(c) || dataOf(d) == dataOf(b) {
				t.Error("a receive reused the memory of a live tensor")
			}
			if !allEqual(b, 2) || !allEqual(c, 3) || !allEqual(d, 4) {
				t.Error("a live received tensor was overwritten")
			}
		})
	}
}

// TestRecycleStream moves many messages with up to three outstanding at
// the receiver, recycling the oldest: every message keeps its own values
// until recycled (run with -race for the hand-off between Recycle and the
// reader goroutine).
func TestRecycleStream(t *testing.T) {
	for name, trs := range recyclingWorlds(t) {
		t.Run(name, func(t *testing.T) {
			defer func() {
				for _, tr := range trs {
					tr.Abort(ErrClosed)
				}
			}()
			const n, outstanding = 200, 3
			errc := make(chan error, 1)
			go func() {
				for i := range n {
					if err := trs[0].Send(1, abi.GradChannel, Tag{Micro: int32(i)}, filled32(poolElems, float32(i))); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			rec := trs[1].(Recycler)
			var held []*tensor.Dense
			for i := range n {
				_, x, err := trs[1].Recv(0, abi.GradChannel)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, x)
				for k, h := range held {
					if !allEqual(h, float32(i-len(held)+1+k)) {
						t.Fatalf("message %d: a held tensor (message %d) changed", i, i-len(held)+1+k)
					}
				}
				if len(held) == outstanding {
					rec.Recycle(held[0])
					held = held[1:]
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestTCPRecycleAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 128 MiB")
	}
	// A queue bound of two frames bounds the arrays in use at once: two
	// queued, one being read, one the receiver holds.
	trs := mustWorld(t, 2, func(_ int, c *TCPConfig) { c.RecvQueueBytes = 2 * (benchBytes + 64) })
	defer func() {
		for _, tr := range trs {
			tr.Kill()
		}
	}()
	x := tensor.New(tensor.WithShape(benchBytes/4), tensor.WithBacking(make([]float32, benchBytes/4)))
	const n = 16
	run := func(recycle bool) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		errc := make(chan error, 1)
		go func() {
			for range n {
				if err := trs[0].Send(1, abi.ActChannel, Tag{}, x); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		for range n {
			_, y, err := trs[1].Recv(0, abi.ActChannel)
			if err != nil {
				t.Fatal(err)
			}
			if recycle {
				trs[1].Recycle(y)
			}
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	run(true) // warm the pool
	if got := run(true); got > 4*benchBytes {
		t.Errorf("%d messages of %d bytes with Recycle allocated %d bytes, want under %d", n, benchBytes, got, 4*benchBytes)
	}
	// The first few reuse what the runs before left in the pool.
	if got := run(false); got < (n-4)*benchBytes {
		t.Errorf("%d messages of %d bytes without Recycle allocated only %d bytes", n, benchBytes, got)
	}
}
