//go:build !nccl

package world_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ppgen/ppgen/runtime/world"
)

// TestNoNCCL: a build without -tags nccl refuses "nccl", naming the tag.
func TestNoNCCL(t *testing.T) {
	_, err := world.Open(context.Background(), "nccl", world.Options{Size: 4})
	var nb *world.NotBuiltError
	if !errors.As(err, &nb) || !errors.Is(err, world.ErrNotBuilt) || nb.Tag != "nccl" {
		t.Fatalf("Open(nccl) = %v, want a *NotBuiltError for tag nccl", err)
	}
	if want := "ppgen built without NCCL: rebuild with -tags nccl (no cgo: NCCL and the CUDA runtime are loaded at run time)"; err.Error() != want {
		t.Errorf("Open(nccl) = %q, want %q", err, want)
	}
	if world.Built("nccl") {
		t.Error(`Built("nccl") without the tag`)
	}
}
