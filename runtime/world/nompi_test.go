//go:build !mpi

package world_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ppgen/ppgen/runtime/world"
)

// TestNoMPI: a build without -tags mpi refuses "mpi", naming the tag.
func TestNoMPI(t *testing.T) {
	_, err := world.Open(context.Background(), "mpi", world.Options{Size: 4})
	var nb *world.NotBuiltError
	if !errors.As(err, &nb) || !errors.Is(err, world.ErrNotBuilt) || nb.Tag != "mpi" {
		t.Fatalf("Open(mpi) = %v, want a *NotBuiltError for tag mpi", err)
	}
	if want := "ppgen built without MPI: rebuild with -tags mpi (needs libopenmpi-dev or an MPICH)"; err.Error() != want {
		t.Errorf("Open(mpi) = %q, want %q", err, want)
	}
	if world.Built("mpi") {
		t.Error(`Built("mpi") without the tag`)
	}
}
