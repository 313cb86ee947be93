//go:build mpi && !race

package mpi_test

const raceEnabled = false
