//go:build mpi && mpich

package mpi

// The MPICH build (-tags mpi,mpich): headers and library from pkg-config's
// mpich (Debian and Ubuntu: libmpich-dev).

// #cgo pkg-config: mpich
import "C"
