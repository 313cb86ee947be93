package transport

import (
	"github.com/ppgen/ppgen/runtime/internal/wire"
	"gorgonia.org/tensor"
)

// Receive buffers (Recycler): TCP's and the in-process transport's receives
// take their backing arrays from runtime/internal/wire's RecvPool, which the
// MPI transport shares; its comment has the ownership rules, its tests are
// there. recvPool is its lower-case face inside this package.
type recvPool struct{ *wire.RecvPool }

func newRecvPool(limit int64) *recvPool { return &recvPool{wire.NewRecvPool(limit)} }

func (p *recvPool) get(dt uint8, dims []int) (*tensor.Dense, []byte) { return p.Get(dt, dims) }
func (p *recvPool) put(t *tensor.Dense)                              { p.Put(t) }
func (p *recvPool) clone(x *tensor.Dense) (*tensor.Dense, error)     { return p.Clone(x) }
