//go:build !mpi

package world

import "github.com/ppgen/ppgen/runtime/transport"

// This build has no MPI engine (no -tags mpi): Check and Open refuse "mpi"
// with a *NotBuiltError before openMPI is reached.

const mpiBuilt = false

func (o Options) openMPI() (transport.Transport, error) { return nil, Check("mpi") }
