package wire

import (
	"sync"
	"unsafe"

	"gorgonia.org/tensor"
)

// Receive buffers (runtime/transport's Recycler, on TCP, in-process and
// MPI). A transport's receives take their backing arrays from a RecvPool: a free list per (dtype, element count) of arrays
// that the receiver handed back with Recycle, else a fresh allocation. The
// pool is one rank's, shared by its peers and channels.
//
// Ownership: a tensor Recv returns is the caller's, as before. Recycle is
// the caller's promise that it and everything it gave the tensor to are done
// with it and with every tensor sharing its memory; only then may a later
// receive write into that memory. The pool guards against the mistakes it
// can see: it takes back only tensors it lent (by the *tensor.Dense that
// Recv returned, still holding the backing it was lent with), each once, so
// a second Recycle of a tensor, a view, a copy or a foreign tensor is
// ignored and two live receives never share memory. What it cannot see (a
// caller that keeps using a tensor it recycled) is the caller's rule.

// FrameOverhead is what a queued message costs in memory beyond its bytes
// on the wire: the *tensor.Dense, its shape and strides, the queue's entry
// and the allocator's rounding (about 360 bytes measured for a one-float
// frame). A receive queue (TCP's, MPI's) charges it per message, so its
// byte bound bounds memory, not payload: a flood of tiny frames once kept
// 259 MiB of payload queued and 2.9 GB resident over TCP
// (TestTCPRecvQueueCountsFrames, and TestMPI's flood).
const FrameOverhead = 512

// MinPooled is the smallest payload, in bytes, that receives take from the
// pool: smaller tensors are cheap to allocate and are not tracked (Recycle
// ignores them).
const MinPooled = 16 << 10

// MaxLent bounds the table of lent tensors. A receiver that drops tensors
// without recycling them leaves entries behind; past the bound an arbitrary
// entry is forgotten (its tensor can no longer be recycled, which is safe:
// the garbage collector frees it as usual).
const MaxLent = 4096

// poolKey is a free list's dtype code and element count.
type poolKey struct {
	dt uint8
	n  int
}

// backing is a free array: f32 or f64 by the key's dtype.
type backing struct {
	f32 []float32
	f64 []float64
}

// lentBuf is what the pool lent: the array's key and the address of its
// first element, to check that the tensor handed back still holds it.
type lentBuf struct {
	key  poolKey
	data uintptr
}

// RecvPool is a rank's pool of receive buffers. Its free arrays take at
// most limit bytes (RecvQueueBytes for TCP and MPI); Recycle drops what would go
// over it.
type RecvPool struct {
	limit int64

	mu    sync.Mutex
	bytes int64 // in free
	free  map[poolKey][]backing
	// lent maps the address of each *tensor.Dense lent and not yet
	// recycled to its buffer. The address is a plain number, so the table
	// keeps nothing alive: an entry whose tensor was dropped is stale, and
	// its address can be taken by a new tensor, which either is lent (and
	// overwrites the entry) or holds another backing (and Recycle refuses
	// it).
	lent map[uintptr]lentBuf

	reused, fresh int64 // receives served from free and by allocation (for tests)
}

func NewRecvPool(limit int64) *RecvPool {
	return &RecvPool{limit: limit, free: make(map[poolKey][]backing), lent: make(map[uintptr]lentBuf)}
}

// Get returns a tensor of dtype dt (dtFloat32 or dtFloat64) and shape dims
// whose backing array, as raw native-order bytes, the caller fills
// completely: a recycled array when one of that dtype and size is free,
// else a new one. dims come from a validated header (runtime/transport's decodeHeader, or Shape) or from
// a tensor in memory, so their product is a valid allocation size.
func (p *RecvPool) Get(dt uint8, dims []int) (*tensor.Dense, []byte) {
	n := 1
	for _, d := range dims {
		n *= d
	}
	if len(dims) == 0 || n*ElemSize(dt) < MinPooled {
		return Alloc(dt, dims)
	}
	key := poolKey{dt, n}
	var b backing
	p.mu.Lock()
	if l := p.free[key]; len(l) > 0 {
		b = l[len(l)-1]
		if len(l) == 1 {
			delete(p.free, key) // no keys left behind for sizes no longer used
		} else {
			l[len(l)-1] = backing{}
			p.free[key] = l[:len(l)-1]
		}
		p.bytes -= int64(n * ElemSize(dt))
		p.reused++
	} else {
		p.fresh++
	}
	p.mu.Unlock()
	var t *tensor.Dense
	var raw []byte
	var data uintptr
	if dt == Float32 {
		t, raw, data = lend(b.f32, dims, n)
	} else {
		t, raw, data = lend(b.f64, dims, n)
	}
	p.mu.Lock()
	if len(p.lent) >= MaxLent {
		for k := range p.lent {
			delete(p.lent, k)
			break
		}
	}
	p.lent[uintptr(unsafe.Pointer(t))] = lentBuf{key, data}
	p.mu.Unlock()
	return t, raw
}

// lend wraps s (a free array of n elements, or nil for a new one) in a
// tensor of shape dims, and returns it with its raw bytes and the address
// of its first element.
func lend[E float32 | float64](s []E, dims []int, n int) (*tensor.Dense, []byte, uintptr) {
	if s == nil {
		s = make([]E, n)
	}
	t := tensor.New(tensor.WithShape(dims...), tensor.WithBacking(s))
	return t, AsBytes(s[:n]), uintptr(unsafe.Pointer(unsafe.SliceData(s)))
}

// Put takes back t if the pool lent it and it still holds the array it was
// lent with (same dtype, address and length); anything else is ignored.
func (p *RecvPool) Put(t *tensor.Dense) {
	if t == nil {
		return
	}
	id := uintptr(unsafe.Pointer(t))
	p.mu.Lock()
	e, ok := p.lent[id]
	if ok {
		delete(p.lent, id)
	}
	p.mu.Unlock()
	if !ok {
		return
	}
	var b backing
	var data uintptr
	var n int
	switch {
	case e.key.dt == Float32 && t.Dtype() == tensor.Float32:
		b.f32 = t.Float32s()
		data, n = uintptr(unsafe.Pointer(unsafe.SliceData(b.f32))), len(b.f32)
	case e.key.dt == Float64 && t.Dtype() == tensor.Float64:
		b.f64 = t.Float64s()
		data, n = uintptr(unsafe.Pointer(unsafe.SliceData(b.f64))), len(b.f64)
	default:
		return
	}
	if data != e.data || n != e.key.n {
		return
	}
	size := int64(n * ElemSize(e.key.dt))
	p.mu.Lock()
	if p.bytes+size <= p.limit {
		p.free[e.key] = append(p.free[e.key], b)
		p.bytes += size
	}
	p.mu.Unlock()
}

// Clone copies x into a contiguous tensor of the same dtype and shape
// taken from the pool.
func (p *RecvPool) Clone(x *tensor.Dense) (*tensor.Dense, error) {
	v, err := PayloadOf(x)
	if err != nil {
		return nil, err
	}
	c, raw := p.Get(v.Dtype, v.Dims)
	copy(raw, v.Raw)
	return c, nil
}

// Limit is the bound of the free arrays, in bytes.
func (p *RecvPool) Limit() int64 { return p.limit }

// Lent is the number of entries in the table of lent tensors (for tests:
// it stays at most MaxLent).
func (p *RecvPool) Lent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lent)
}

// Stats returns how many receives were served from recycled arrays and by
// allocation, and the bytes now free (for tests).
func (p *RecvPool) Stats() (reused, fresh, free int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reused, p.fresh, p.bytes
}
