//go:build nccl

package main

import (
	"context"

	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/transport"
	"github.com/ppgen/ppgen/runtime/transport/nccl"
)

// dialNCCL joins the world over NCCL (-transport nccl): the control
// connection is cfg, the device the rank's LOCAL_RANK modulo the GPUs.
func dialNCCL(env launch.Env, cfg transport.TCPConfig) (transport.Transport, error) {
	nc := nccl.ConfigFromEnv(env, cfg.Fingerprint)
	nc.TCP = cfg
	return nccl.Dial(context.Background(), nc)
}
