package world

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/transport"
)

// sizeVars is, per launcher (launch.Env's Source), the variable its world
// size came from, for the error when it is not the job's.
var sizeVars = map[string]string{
	"torchrun": "WORLD_SIZE",
	"openmpi":  "OMPI_COMM_WORLD_SIZE",
	"pmi":      "PMI_SIZE",
	"slurm":    "SLURM_NTASKS",
}

// env is Options.Env, else the process environment's (launch.FromEnv).
func (o Options) env() (launch.Env, error) {
	if o.Env != nil {
		return *o.Env, nil
	}
	// A rank of ppgen launch, perhaps started by a shell that the launcher
	// started, ends with the launcher.
	launch.WatchLauncher()
	return launch.FromEnv()
}

// tcpConfig is the TCP configuration of the rank env describes, with o's
// fingerprint, schedule, timeouts and logger.
func (o Options) tcpConfig(env launch.Env) transport.TCPConfig {
	cfg := transport.ConfigFromEnv(env, o.Fingerprint)
	cfg.Schedule = o.Schedule // named when ranks refuse each other
	cfg.Logger = o.logger()
	if o.Timeout > 0 {
		cfg.Timeout = o.Timeout // over PPGEN_TIMEOUT
	}
	cfg.RendezvousTimeout = o.RendezvousTimeout
	return cfg
}

// dial connects the rank the environment names over TCP, or with "nccl"
// over NCCL, whose control connection is that TCP world.
func (o Options) dial(ctx context.Context, name string) (transport.Transport, error) {
	env, err := o.env()
	if err != nil {
		return nil, err
	}
	if o.Config == nil { // else Open refuses it after comparing the configurations
		if err := o.tcpSizeError(env); err != nil {
			return nil, err
		}
	}
	cfg := o.tcpConfig(env)
	if name == "nccl" {
		return dialNCCL(ctx, env, cfg) // nccl.go (-tags nccl), else nonccl.go's error
	}
	return dialTCP(ctx, cfg)
}

// tcpSizeError is the refusal of a launcher's world of another size than
// the job's, or nil.
func (o Options) tcpSizeError(env launch.Env) error {
	if o.Size == 0 || env.World == o.Size {
		return nil
	}
	v := sizeVars[env.Source]
	if v == "" {
		v = "the world size"
	}
	return o.sizeError(fmt.Sprintf("%s=%d", v, env.World), fmt.Sprintf("start %d ranks", o.Size))
}

// dialTCP is transport.DialTCP as a transport.Transport: nil on error.
func dialTCP(ctx context.Context, cfg transport.TCPConfig) (transport.Transport, error) {
	t, err := transport.DialTCP(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// loopback connects o.Size TCP ranks, goroutines of this process, on
// 127.0.0.1 with a fresh token.
func loopback(ctx context.Context, o Options) ([]transport.Transport, error) {
	timeout, err := o.timeout()
	if err != nil {
		return nil, err
	}
	token, err := launch.NewToken()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("loopback TCP world: %w", err)
	}
	n := o.Size
	eps := make([]transport.Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cfg := o.tcpConfig(launch.Env{Rank: r, World: n, Token: token, Timeout: timeout})
		cfg.MasterAddr = ln.Addr().String()
		if r == 0 {
			cfg.Listener = ln // DialTCP closes it
		}
		wg.Go(func() {
			eps[r], errs[r] = dialTCP(ctx, cfg)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, ep := range eps {
			if ep != nil {
				ep.Abort(err)
			}
		}
		return nil, err
	}
	return eps, nil
}
