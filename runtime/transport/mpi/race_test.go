//go:build mpi && race

package mpi_test

// raceEnabled: the race detector's shadow memory makes resident sizes
// meaningless.
const raceEnabled = true
