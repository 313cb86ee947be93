package transport

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/internal/wire"
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

func TestRecvPoolBounds(t *testing.T) {
	const elems = poolElems
	size := int64(elems * 4)
	p := newRecvPool(3 * size)
	var ts []*tensor.Dense
	for range 5 {
		x, _ := p.get(wire.Float32, []int{elems})
		ts = append(ts, x)
	}
	for _, x := range ts {
		p.put(x)
	}
	if _, fresh, free := p.stats(); fresh != 5 || free != 3*size {
		t.Errorf("after 5 fresh gets and 5 puts with room for 3: fresh %d, free %d bytes; want 5, %d", fresh, free, 3*size)
	}
	// Another shape of the same element count reuses; another dtype does not.
	if x, _ := p.get(wire.Float32, []int{elems / 2, 2}); !slicesEqualShape(x.Shape(), []int{elems / 2, 2}) {
		t.Errorf("reused tensor has shape %v", x.Shape())
	}
	p.get(wire.Float64, []int{elems})
	if reused, fresh, free := p.stats(); reused != 1 || fresh != 6 || free != 2*size {
		t.Errorf("reused %d, fresh %d, free %d; want 1, 6, %d", reused, fresh, free, 2*size)
	}
	// Small and empty tensors are not pooled; a scalar keeps its shape.
	small, _ := p.get(wire.Float32, []int{16})
	empty, _ := p.get(wire.Float64, []int{0, 3})
	scalar, _ := p.get(wire.Float64, nil)
	if len(scalar.Shape()) != 0 || len(empty.Float64s()) != 0 {
		t.Errorf("scalar shape %v, empty tensor with %d elements", scalar.Shape(), len(empty.Float64s()))
	}
	before := p.Lent()
	p.put(small)
	p.put(empty)
	if _, fresh, _ := p.stats(); fresh != 6 || p.Lent() != before {
		t.Errorf("small tensors were tracked: fresh %d, lent %d (was %d)", fresh, p.Lent(), before)
	}
	// The table of lent tensors stays bounded when nothing comes back.
	q := newRecvPool(size)
	for range maxLent + 50 {
		q.get(wire.Float32, []int{elems})
	}
	if q.Lent() > maxLent {
		t.Errorf("lent table has %d entries, bound %d", q.Lent(), maxLent)
	}
}

func slicesEqualShape(a tensor.Shape, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTCPRecycleAllocs counts the bytes the process allocates while moving
// 4 MiB tensors: with Recycle the receives reuse a few buffers, without it
// every message allocates its payload (which shows the measure can tell).
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

// FuzzRecvPool runs a sequence of pool operations read from the input
// (get of one of four sizes and two dtypes, recycle of a held tensor, a
// second recycle of one already back, recycle of a view) and checks the
// pool's promises after each: no two held tensors share memory, a held
// tensor keeps what was written into it, the free arrays stay within the
// bound.
func FuzzRecvPool(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 2, 0, 3})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0}) // recycled twice, then two gets
	f.Add([]byte{0, 4, 1, 0, 2, 0, 0, 4, 3, 0})
	f.Add([]byte{0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		// At most 128 operations: a pool of a few buffers has no state
		// that a longer input reaches and these do not, and a few thousand
		// operations (each step checks every live tensor) read as hung.
		ops = ops[:min(len(ops), 256)]
		const unit = minPooled / 4 // float32 elements of the smallest pooled array
		p := newRecvPool(3 * minPooled * 2)
		type held struct {
			t    *tensor.Dense
			mark byte
		}
		var live []held
		var back []*tensor.Dense // recycled: must be ignored if recycled again
		var mark byte
		// Contents are marked and checked at a stride (and at the last
		// byte): a buffer handed out twice changes at every sampled byte,
		// and overlaps are checked by address below. Every byte of every
		// live tensor after every step made one input cost ~100 MB of reads.
		const stride = 257
		fill := func(x *tensor.Dense, v byte) {
			_, raw := memOf(x)
			for i := 0; i < len(raw); i += stride {
				raw[i] = v
			}
			raw[len(raw)-1] = v
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%4, int(ops[i+1])
			switch op {
			case 0: // get
				dt := uint8(wire.Float32)
				if arg&4 != 0 {
					dt = wire.Float64
				}
				n := unit * (1 + arg%4)
				if dt == wire.Float64 {
					n /= 2
				}
				x, raw := p.get(dt, []int{n})
				if len(raw) != n*wire.ElemSize(dt) {
					t.Fatalf("get(%d, %d): %d raw bytes", dt, n, len(raw))
				}
				mark++
				fill(x, mark)
				live = append(live, held{x, mark})
			case 1: // recycle a held tensor
				if len(live) > 0 {
					k := arg % len(live)
					p.put(live[k].t)
					back = append(back, live[k].t)
					live = append(live[:k], live[k+1:]...)
				}
			case 2: // recycle again one already back
				if len(back) > 0 {
					p.put(back[arg%len(back)])
				}
			case 3: // recycle a view or a shallow copy of a held tensor
				if len(live) > 0 {
					x := live[arg%len(live)].t
					if arg&1 == 0 {
						p.put(x.ShallowClone())
					} else if v, err := x.Slice(tensor.S(0, 1)); err == nil {
						if d, ok := v.(*tensor.Dense); ok {
							p.put(d)
						}
					}
				}
			}
			for a := range live {
				pa, ra := memOf(live[a].t)
				for j := 0; j < len(ra); j += stride {
					if ra[j] != live[a].mark || ra[len(ra)-1] != live[a].mark {
						t.Fatalf("op %d: a held tensor lost its contents", i/2)
					}
				}
				for b := a + 1; b < len(live); b++ {
					pb, rb := memOf(live[b].t)
					if pa < pb+uintptr(len(rb)) && pb < pa+uintptr(len(ra)) {
						t.Fatalf("op %d: two held tensors share memory", i/2)
					}
				}
			}
			if _, _, free := p.stats(); free > p.Limit() || free < 0 {
				t.Fatalf("op %d: %d bytes free, bound %d", i/2, free, p.Limit())
			}
		}
	})
}

// memOf returns the address and raw bytes of x's backing array.
func memOf(x *tensor.Dense) (uintptr, []byte) {
	if x.Dtype() == tensor.Float64 {
		s := x.Float64s()
		return uintptr(unsafe.Pointer(unsafe.SliceData(s))), wire.AsBytes(s)
	}
	s := x.Float32s()
	return uintptr(unsafe.Pointer(unsafe.SliceData(s))), wire.AsBytes(s)
}
