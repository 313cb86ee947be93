//go:build !mpi

package mpi

import "github.com/ppgen/ppgen/runtime/transport"

// Built reports whether this build has the MPI transport (the mpi build
// tag). Without it, [New] returns [ErrNotBuilt].
const Built = false

// New returns [ErrNotBuilt]: this build has no MPI transport. Rebuild with
// -tags mpi (OpenMPI, found through pkg-config's ompi-c) or -tags mpi,mpich
// (MPICH, pkg-config's mpich); docs/internals.md, "The MPI transport".
func New(cfg Config) (transport.Transport, error) { return nil, ErrNotBuilt }
