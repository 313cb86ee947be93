//go:build !nccl

package world

import (
	"context"

	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/transport"
)

// This build has no NCCL engine (no -tags nccl): Check and Open refuse
// "nccl" with a *NotBuiltError before dialNCCL is reached.

const ncclBuilt = false

func dialNCCL(context.Context, launch.Env, transport.TCPConfig) (transport.Transport, error) {
	return nil, Check("nccl")
}
