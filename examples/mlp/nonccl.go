//go:build !nccl

package main

import (
	"errors"

	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/transport"
)

// dialNCCL: this binary has no NCCL transport.
func dialNCCL(launch.Env, transport.TCPConfig) (transport.Transport, error) {
	return nil, errors.New("-transport nccl: this binary was built without the NCCL transport; build it with go build -tags nccl ./examples/mlp")
}
