//go:build mpi && !mpich

package mpi

// The OpenMPI build (-tags mpi): headers and library from pkg-config's
// ompi-c (Debian and Ubuntu: libopenmpi-dev). With another layout, set
// PKG_CONFIG_PATH to the directory holding ompi-c.pc.

// #cgo pkg-config: ompi-c
import "C"
