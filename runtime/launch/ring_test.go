package launch_test

import (
	"context"
	"errors"
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

func init() { launch.ExtraHelpers["stall"] = stall }

// stall is ring with rank 2 stopping itself (SIGSTOP) after the
// rendezvous: alive but silent, as a rank a user or a debugger stopped.
// Every other rank reports the rank its transport blames ("blame rank N:
// ..."), from the heartbeats (1 s timeout here), and exits 1.
func stall(env launch.Env) int {
	cfg := transport.ConfigFromEnv(env, "fp-stall")
	cfg.RendezvousTimeout = 20 * time.Second
	cfg.Timeout = 20 * time.Second
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.HeartbeatTimeout = time.Second
	tr, err := transport.DialTCP(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	defer tr.Close()
	if env.Rank == 2 {
		stopSelf()
	}
	next, prev := (env.Rank+1)%env.World, (env.Rank+env.World-1)%env.World
	x := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{float64(env.Rank)}))
	if err = tr.Send(next, abi.ActChannel, transport.Tag{}, x); err == nil {
		_, _, err = tr.Recv(prev, abi.ActChannel)
		if err == nil {
			// Past the ring: wait on the stopped rank's next message.
			_, _, err = tr.Recv(prev, abi.GradChannel)
		}
	}
	tr.Abort(err) // as runtime/pipe does on a failed step: the peers learn the cause
	var pe *transport.PeerError
	if errors.As(err, &pe) {
		fmt.Printf("blame rank %d: %v\n", pe.Peer, err)
	} else {
		fmt.Printf("no blame: %v\n", err)
	}
	return 1
}
