//go:build mpi

package world

import (
	"fmt"

	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/transport/mpi"
)

// The MPI engine (-tags mpi): the one place world calls the MPI transport.

const mpiBuilt = true

// openMPI starts the MPI transport: the rank and world size are MPI's.
func (o Options) openMPI() (transport.Transport, error) {
	timeout, err := o.timeout()
	if err != nil {
		return nil, err
	}
	tr, err := mpi.New(mpi.Config{Sync: o.Sync, Timeout: timeout,
		Fingerprint: o.Fingerprint, Schedule: o.Schedule, Logger: o.logger()})
	if err != nil {
		return nil, err
	}
	if o.Size > 0 && tr.World() != o.Size {
		// Every rank sees the same world size: all close alike.
		tr.Close()
		return nil, o.sizeError(fmt.Sprintf("MPI started %d processes", tr.World()), fmt.Sprintf("run mpirun -np %d", o.Size))
	}
	return tr, nil
}
