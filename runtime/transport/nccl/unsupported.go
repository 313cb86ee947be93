//go:build !(linux && (amd64 || arm64))

package nccl

import (
	"context"
	"fmt"
	"runtime"

	"github.com/ppgen/ppgen/runtime/transport"
)

// Transport is the NCCL transport. On this platform [Dial] always fails.
type Transport struct{ transport.Transport }

// Dial fails: the NCCL transport runs on linux/amd64 and linux/arm64, where
// purego can pass ncclUniqueId by value and NCCL exists.
func Dial(ctx context.Context, cfg Config) (*Transport, error) {
	return nil, fmt.Errorf("transport: rank %d: NCCL: %w: %s/%s (the NCCL transport runs on linux/amd64 and linux/arm64)", cfg.TCP.Rank, ErrUnsupported, runtime.GOOS, runtime.GOARCH)
}
