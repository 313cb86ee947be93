//go:build !mpi

package transport

// MPIBuilt reports whether this build has the MPI transport (the mpi build
// tag). Without it, [NewMPI] returns [ErrNoMPI].
const MPIBuilt = false

// NewMPI returns [ErrNoMPI]: this build has no MPI transport. Rebuild with
// -tags mpi (OpenMPI, found through pkg-config's ompi-c) or -tags mpi,mpich
// (MPICH, pkg-config's mpich); docs/internals.md, "The MPI transport".
func NewMPI(cfg MPIConfig) (Transport, error) { return nil, ErrNoMPI }
