package launch_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/transport"
)

// The "ring" helper mode of TestLocalTCPRing: a real multi-process job, TCP
// rendezvous from the environment (transport.ConfigFromEnv), then every rank
// sends its rank to the next one. It lives in the external test package
// because transport imports launch.
func init() { launch.ExtraHelpers["ring"] = ring }

func ring(env launch.Env) int {
	cfg := transport.ConfigFromEnv(env, "fp-ring")
	cfg.RendezvousTimeout = 20 * time.Second
	cfg.Timeout = 20 * time.Second
	tr, err := transport.DialTCP(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	defer tr.Close()
	next, prev := (env.Rank+1)%env.World, (env.Rank+env.World-1)%env.World
	x := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{float64(env.Rank)}))
	if err := tr.Send(next, abi.ActChannel, transport.Tag{}, x); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	_, got, err := tr.Recv(prev, abi.ActChannel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 6
	}
	fmt.Printf("got %v from rank %d\n", got.Float64s()[0], prev)
	return 0
}
