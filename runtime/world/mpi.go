package world

import (
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/transport/mpi"
)

// The MPI engine: the one place world calls the MPI transport, which is
// built with -tags mpi (runtime/transport/mpi's stub otherwise: Built is
// false and Check refuses "mpi" before openMPI is reached).

const mpiBuilt = mpi.Built

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
	if o.Config == nil && o.Size > 0 && tr.World() != o.Size {
		// Every rank sees the same world size: all close alike. (With
		// Config, Open refuses it after comparing the configurations.)
		tr.Close()
		return nil, o.mpiSizeError(tr.World())
	}
	return tr, nil
}
