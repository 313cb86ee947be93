//go:build nccl

package world

import (
	"context"

	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/transport/nccl"
)

// The NCCL engine (-tags nccl): the one place world calls the NCCL
// transport.

const ncclBuilt = true

// dialNCCL joins the world over NCCL: the control connection is cfg, the
// device the rank's LOCAL_RANK modulo the GPUs.
func dialNCCL(ctx context.Context, env launch.Env, cfg transport.TCPConfig) (transport.Transport, error) {
	nc := nccl.ConfigFromEnv(env, cfg.Fingerprint)
	nc.TCP = cfg
	t, err := nccl.Dial(ctx, nc)
	if err != nil {
		return nil, err
	}
	return t, nil
}
