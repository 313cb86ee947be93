// Package world opens the transport a job's ranks talk over, by name, from
// the launcher's environment and a few options: the one way a trainer
// starts its transport.
//
//	"inproc"  every rank a goroutine of this process (transport.NewInProc)
//	"tcp"     ppgen's TCP transport, one rank per process: the rank, world
//	          size, rendezvous address, token and PPGEN_TIMEOUT come from
//	          the launcher's variables (launch.FromEnv); with
//	          Options.Loopback, every rank in this process on 127.0.0.1
//	"mpi"     the MPI transport, one rank per process: rank and world size
//	          are MPI's (mpirun -np N); a build with -tags mpi (cgo)
//	"nccl"    the NCCL transport, one rank and GPU per process, started as
//	          for tcp (its control connection is that TCP world); a build
//	          with -tags nccl
//
// [Open] returns a [World]: the endpoints of the ranks that live in this
// process (all of them for inproc and Loopback, one otherwise), in rank
// order, and the collectives mode of its data-parallel groups
// ([World.NewComm]). Options carry what every transport shares: the
// schedule's fingerprint (ranks of another schedule refuse each other) and
// its description (named in that refusal), the progress timeout, the world
// size the job needs (checked against the launcher's, with the fix in the
// error), synchronous sends (MPI), the collectives mode and the run
// configuration every rank must share (Options.Config: compared at Open
// over the opened world, a difference named by a *[ConfigError]; config.go).
//
// MPI and NCCL are optional engines behind build tags, so that the default
// build needs no cgo and links no GPU loader: in a build without the tag,
// Open("mpi", ...) and Open("nccl", ...) return a *[NotBuiltError] that says
// which tag to rebuild with ([Check] says so before anything is started).
// The engine-specific code is one small file each: mpi.go and nccl.go.
//
// A process started by hand, with no launcher's variables, cannot open a
// "tcp" or "nccl" world for one rank; [SelfLaunch] tells a trainer to start
// its ranks first (launch.Self), as examples/mlp does.
package world

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/launch"
	"github.com/ppgen/ppgen/runtime/transport"
)

// names are the transports Open knows, in the order errors list them.
var names = []string{"inproc", "tcp", "mpi", "nccl"}

// Names returns the transports Open knows: inproc, tcp, mpi and nccl
// (whether or not this build has the last two; see [Built]).
func Names() []string { return append([]string(nil), names...) }

// Options configures [Open]. The zero value opens one rank of a "tcp",
// "mpi" or "nccl" world of any size, with the environment's timeout.
type Options struct {
	// Size is the world size the job needs: the schedule's ranks (times
	// its data-parallel replicas). "inproc" and Loopback open this many
	// ranks (it must be at least 1); "tcp", "mpi" and "nccl" refuse a
	// launcher's world of another size, unless Size is 0.
	Size int
	// SizeNote says why the job needs Size ranks, for that refusal:
	// "schedule zbv has 4 ranks". Default "the job needs Size ranks".
	SizeNote string

	// Fingerprint identifies the schedule (the generated code's
	// Fingerprint): ranks with different fingerprints refuse each other
	// ("tcp", "mpi", "nccl").
	Fingerprint string
	// Schedule describes the schedule for people (pipe.Spec's Describe):
	// a rank that refuses another names what each runs
	// (TCPConfig.Schedule, MPIConfig.Schedule).
	Schedule string

	// Timeout bounds every send and receive wait (the transports'
	// progress timeout). 0: the environment's PPGEN_TIMEOUT (Env.Timeout
	// when Env is set), else transport.DefaultTimeout. Negative is refused.
	Timeout time.Duration
	// RendezvousTimeout bounds the TCP rendezvous ("tcp", "nccl"'s control
	// connection). 0: transport.DefaultRendezvousTimeout.
	RendezvousTimeout time.Duration

	// Sync makes every send synchronous ("mpi" only: MPI_Issend), the
	// rendezvous semantics ppgen verifies schedules under.
	Sync bool
	// Collectives is how [World.NewComm] runs a group's collectives:
	// "member-order" (the default, ""), "native" or "sendrecv"; see
	// [CollectiveModes].
	Collectives string

	// Config is the run configuration every rank must share, as settings
	// (a trainer's flags: "-seed": "1", "-dp": "2", …). When it is not nil,
	// Open all-gathers a hash of it, with the world's own settings "size"
	// (Size) and "collectives", over the world it opened ("tcp", "mpi",
	// "nccl"), and fails on every rank at once with a *[ConfigError]
	// naming the first differing setting and the ranks ("rank 5 runs
	// -seed 2, rank 0 -seed 1") instead of a job whose ranks train apart
	// or wait. A launcher's world of another size than Size is then
	// refused after that comparison, so that the others are not left
	// waiting. At most MaxConfigBytes encoded.
	Config map[string]string

	// Loopback opens every rank of a "tcp" world of Size ranks in this
	// process, on 127.0.0.1 with a fresh token: for tests and
	// measurements of the TCP transport without launching processes.
	Loopback bool
	// Env is the rank's environment; nil reads it with launch.FromEnv
	// ("tcp", "nccl") or reads only PPGEN_TIMEOUT (the others).
	Env *launch.Env
	// Logger receives the transports' warnings. Default slog.Default().
	Logger *slog.Logger
}

// A World is the endpoints of one job's ranks that live in this process.
type World struct {
	// Name is the transport: "inproc", "tcp", "mpi" or "nccl".
	Name string
	// Size is the number of ranks in the whole world.
	Size int
	// Endpoints are this process's ranks, in rank order: all Size of them
	// for "inproc" and Loopback, this process's one otherwise.
	Endpoints []transport.Transport
	coll      []collective.Option
}

// Endpoint is the world's first endpoint in this process: its only one in
// a world of one rank per process.
func (w *World) Endpoint() transport.Transport { return w.Endpoints[0] }

// NewComm returns a collective.Comm on group (an endpoint of w, or a
// runtime/mesh view of one) with the collectives mode of Options.Collectives.
func (w *World) NewComm(group transport.Transport, ch abi.Channel) (*collective.Comm, error) {
	return collective.New(group, ch, w.coll...)
}

// Close closes every endpoint, concurrently (a TCP endpoint's Close waits
// for its peers' goodbyes), and returns their errors, joined. On the
// engines that need it ("mpi"), Close waits for every rank.
func (w *World) Close() error {
	errs := make([]error, len(w.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range w.Endpoints {
		wg.Go(func() { errs[i] = ep.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Abort aborts every endpoint with cause; peers fail naming this rank.
func (w *World) Abort(cause error) {
	for _, ep := range w.Endpoints {
		ep.Abort(cause)
	}
}

// ErrNotBuilt is wrapped by a [NotBuiltError].
var ErrNotBuilt = errors.New("transport not built in")

// NotBuiltError is the error of Open and Check for a transport this build
// lacks: its engine is behind a build tag.
type NotBuiltError struct {
	Transport string // "mpi" or "nccl"
	Tag       string // the build tag: "mpi", "nccl"
	Note      string // what the build needs
}

func (e *NotBuiltError) Error() string {
	return fmt.Sprintf("ppgen built without %s: rebuild with -tags %s (%s)", strings.ToUpper(e.Transport), e.Tag, e.Note)
}

func (e *NotBuiltError) Unwrap() error { return ErrNotBuilt }

// Built reports whether this build has the transport name: inproc and tcp
// always, mpi with -tags mpi, nccl with -tags nccl.
func Built(name string) bool {
	switch name {
	case "inproc", "tcp":
		return true
	case "mpi":
		return mpiBuilt
	case "nccl":
		return ncclBuilt
	}
	return false
}

// Check reports whether Open knows the transport name and this build has
// it: an error naming the value and the choices, or a *NotBuiltError
// naming the build tag. It starts nothing.
func Check(name string) error {
	switch name {
	case "inproc", "tcp":
		return nil
	case "mpi":
		if !mpiBuilt {
			return &NotBuiltError{Transport: "mpi", Tag: "mpi", Note: "needs libopenmpi-dev or an MPICH"}
		}
		return nil
	case "nccl":
		if !ncclBuilt {
			return &NotBuiltError{Transport: "nccl", Tag: "nccl", Note: "no cgo: NCCL and the CUDA runtime are loaded at run time"}
		}
		return nil
	}
	return fmt.Errorf("unknown transport %q: want %s", name, choices(names))
}

// choices is "a, b, c or d".
func choices(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

// SelfLaunch reports whether a process that is to open name for one rank
// must first start the job's ranks itself (launch.Self): "tcp" and "nccl"
// without a launcher's variables in the environment (launch.Launched).
func SelfLaunch(name string) bool {
	return (name == "tcp" || name == "nccl") && !launch.Launched()
}

// CollectiveModes are the values of Options.Collectives, the default first:
//
//	member-order  the engine's own data movement where the transport has
//	              collectives (MPI's, NCCL's), with the sums in member
//	              order: bit-identical to runtime/collective's algorithms
//	native        the engine's own collectives, sums included: faster,
//	              sums in the engine's order
//	sendrecv      runtime/collective's algorithms over Send and Recv
//
// On transports without collectives (inproc, tcp) all three run
// runtime/collective's algorithms.
var CollectiveModes = []string{"member-order", "native", "sendrecv"}

// collectiveOptions are runtime/collective's options for mode.
func collectiveOptions(mode string) ([]collective.Option, error) {
	switch mode {
	case "", "member-order":
		return []collective.Option{collective.MemberOrder()}, nil
	case "native":
		return nil, nil
	case "sendrecv":
		return []collective.Option{collective.SendRecv()}, nil
	}
	return nil, fmt.Errorf("collectives %q: want member-order (the engine's data movement, member-order sums), native (the engine's own collectives, MPI's and NCCL's) or sendrecv (runtime/collective's over Send and Recv)", mode)
}

// Open opens the transport name ("inproc", "tcp", "mpi" or "nccl") as o
// says and returns this process's endpoints of it. Errors name the
// offending value and the fix; a transport this build lacks is a
// *NotBuiltError. ctx bounds the TCP rendezvous ("tcp", "nccl").
func Open(ctx context.Context, name string, o Options) (*World, error) {
	if err := Check(name); err != nil {
		return nil, err
	}
	if err := o.check(name); err != nil {
		return nil, err
	}
	coll, err := collectiveOptions(o.Collectives)
	if err != nil {
		return nil, err
	}
	w := &World{Name: name, coll: coll}
	switch {
	case name == "inproc":
		timeout, err := o.timeout()
		if err != nil {
			return nil, err
		}
		w.Endpoints = transport.NewInProc(o.Size, transport.InProcTimeout(timeout))
	case o.Loopback:
		if w.Endpoints, err = loopback(ctx, o); err != nil {
			return nil, err
		}
	case name == "mpi":
		ep, err := o.openMPI()
		if err != nil {
			return nil, err
		}
		w.Endpoints = []transport.Transport{ep}
	default: // tcp, nccl: from the launcher's environment
		ep, err := o.dial(ctx, name)
		if err != nil {
			return nil, err
		}
		w.Endpoints = []transport.Transport{ep}
	}
	w.Size = w.Endpoints[0].World()
	if err := o.agree(name, w); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// agree compares the run configuration (Options.Config) across a world of
// one rank per process, then refuses a world of another size than the
// job's (whose refusal waits for the comparison when Config is set).
func (o Options) agree(name string, w *World) error {
	if name == "inproc" || o.Loopback {
		return nil // every rank in this process, of these Options
	}
	if c := o.runConfig(); c != nil {
		if err := agreeConfig(w.Endpoint(), c); err != nil {
			return err
		}
	}
	if o.Size == 0 || w.Size == o.Size {
		return nil
	}
	if name == "mpi" {
		return o.mpiSizeError(w.Size)
	}
	env, err := o.env()
	if err != nil {
		return err
	}
	return o.tcpSizeError(env)
}

// mpiSizeError is the refusal of an MPI world of n processes.
func (o Options) mpiSizeError(n int) error {
	return o.sizeError(fmt.Sprintf("MPI started %d processes", n), fmt.Sprintf("run mpirun -np %d", o.Size))
}

// check refuses options that do not fit the transport name.
func (o Options) check(name string) error {
	switch {
	case o.Timeout < 0:
		return fmt.Errorf("timeout %v is negative: want a duration such as 30s, or 0 for PPGEN_TIMEOUT or the default %v", o.Timeout, transport.DefaultTimeout)
	case o.RendezvousTimeout < 0:
		return fmt.Errorf("rendezvous timeout %v is negative: want a duration such as 2m, or 0 for the default %v", o.RendezvousTimeout, transport.DefaultRendezvousTimeout)
	case o.Size < 0:
		return fmt.Errorf("world size %d is negative: want the ranks the job needs, or 0 for any", o.Size)
	case o.Sync && name != "mpi":
		return fmt.Errorf("synchronous sends are the MPI transport's: open \"mpi\", not %q, or drop Sync (-mpi-sync)", name)
	case o.Loopback && name != "tcp":
		return fmt.Errorf("Loopback runs a TCP world in this process: open \"tcp\", not %q, or drop Loopback", name)
	case (name == "inproc" || o.Loopback) && o.Size < 1:
		return fmt.Errorf("transport %q runs every rank in this process: set the world size (Options.Size) to the ranks the job needs, not %d", name, o.Size)
	}
	if c := o.runConfig(); c != nil {
		if n := len(encodeConfig(c)); n > MaxConfigBytes {
			return fmt.Errorf("run configuration (Options.Config) of %d bytes: at most %d", n, MaxConfigBytes)
		}
	}
	return nil
}

// timeout is the progress timeout: Options.Timeout, else PPGEN_TIMEOUT
// (Env's, or the process environment's), else 0 (the transport's default).
func (o Options) timeout() (time.Duration, error) {
	if o.Timeout > 0 {
		return o.Timeout, nil
	}
	if o.Env != nil {
		return o.Env.Timeout, nil
	}
	return launch.TimeoutFromEnv()
}

// sizeError is the refusal of a launcher's world of got ranks; started
// says who started them ("WORLD_SIZE=5", "MPI started 5 processes"), fix
// how to start the right number.
func (o Options) sizeError(started string, fix string) error {
	note := o.SizeNote
	if note == "" {
		note = fmt.Sprintf("the job needs %d ranks", o.Size)
	}
	return fmt.Errorf("%s but %s: %s", started, note, fix)
}

// logger is Options.Logger, else slog.Default().
func (o Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}
