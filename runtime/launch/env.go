// Package launch starts ranks and tells each rank who it is.
//
// [FromEnv] reads the rank, world size and rendezvous address the way
// torchrun and most launchers set them (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, LOCAL_RANK), falling back, in this order, to OpenMPI's
// mpirun (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK), to PMI's (PMI_RANK,
// PMI_SIZE, MPI_LOCALRANKID: MPICH's mpiexec, srun --mpi=pmi2) and to
// SLURM's variables (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) under srun.
// The rank and world size come from the first of these that sets a rank;
// the rendezvous address (which the TCP transport needs, MPI's does not)
// is MASTER_ADDR, else the first host of SLURM_JOB_NODELIST, else
// 127.0.0.1 when an MPI launcher says every rank is on this node
// (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS); its port is MASTER_PORT,
// else one derived from SLURM_JOB_ID or OpenMPI's job number. The shared token for the TCP
// handshake comes from PPGEN_TOKEN; PPGEN_ALLOW_NO_TOKEN=1 is the explicit
// opt-out of authentication, PPGEN_PLAIN_FRAMES=1 that of frame
// authentication (for trusted networks), and PPGEN_TIMEOUT (a Go duration such as 90s)
// bounds every send and receive wait of the transport
// (transport.ConfigFromEnv makes an Env the transport's configuration; launch
// itself does not import the transport, so the ppgen command links no tensor
// library). Every integer is
// range-checked (WORLD_SIZE at most [MaxWorld]); errors name the variable,
// its value and the accepted range.
//
// [Local] runs N copies of a command on this machine with those variables
// set, prefixes their output with "[rank N] ", reports every exit status, and
// when one rank fails gives the others a grace period to fail on their own
// (they do: their transports name the failed rank) before killing them. The
// ranks die with the launcher: on Linux each gets a parent-death signal,
// and SIGTERM/SIGINT sent to the launcher are forwarded to every rank. See
// [Local] for the details and [MaxLocal] for the bound on the rank count.
package launch

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Env is one rank's view of the job.
type Env struct {
	Rank       int    // global rank
	World      int    // number of ranks
	LocalRank  int    // rank on this node (0 when the launcher does not say)
	MasterAddr string // host of rank 0's rendezvous listener
	MasterPort int    // its port
	Token      string // shared secret for the TCP handshake (PPGEN_TOKEN), may be empty
	// AllowNoToken is PPGEN_ALLOW_NO_TOKEN=1: the explicit opt-out that lets
	// a job of more than one rank run without a token (the transport refuses
	// an empty Token otherwise and logs a warning when it is allowed).
	AllowNoToken bool
	// PlainFrames is PPGEN_PLAIN_FRAMES=1: the explicit opt-out of frame
	// authentication for trusted networks (TCPConfig.PlainFrames; logged as
	// a warning).
	PlainFrames bool
	// Timeout is PPGEN_TIMEOUT: the transport's bound on every send and
	// receive wait (TCPConfig.Timeout in runtime/transport, whose
	// ConfigFromEnv turns an Env into that configuration); 0 keeps the transport's
	// default.
	Timeout time.Duration
	Source  string // "torchrun" (RANK, WORLD_SIZE, ...), "openmpi", "pmi" or "slurm"
}

// Bounds of the environment's values. A job larger than MaxWorld ranks is
// refused: the figure is far above any pipeline's rank count and keeps
// every per-rank table a rank builds from WORLD_SIZE small.
const (
	MaxWorld   = 65536
	MaxTimeout = 24 * time.Hour
)

// Addr returns MasterAddr:MasterPort.
func (e Env) Addr() string { return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.MasterPort)) }

// ErrNotLaunched is returned (wrapped) by FromEnv when no launcher's
// variables are set (torchrun-style, OpenMPI, PMI, SLURM): the process was started by hand. Trainers may
// fall back to a single rank.
var ErrNotLaunched = errors.New("not started by a launcher")

// The environment variables of ppgen's own (the others are torchrun's and
// SLURM's).
const (
	TokenVar        = "PPGEN_TOKEN"          // the shared token
	AllowNoTokenVar = "PPGEN_ALLOW_NO_TOKEN" // 1: run without a token
	PlainFramesVar  = "PPGEN_PLAIN_FRAMES"   // 1: frames without MACs (trusted networks)
	TimeoutVar      = "PPGEN_TIMEOUT"        // the transport's Timeout
)

// FromEnv reads the process environment. See FromLookup.
func FromEnv() (Env, error) { return FromLookup(os.LookupEnv) }

// FromLookup reads the job description through lookup (os.LookupEnv in
// FromEnv). torchrun-style variables win over OpenMPI's, which win over
// PMI's, which win over SLURM's (see the package documentation); errors
// name the variable and its value.
func FromLookup(lookup func(string) (string, bool)) (Env, error) {
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	// integer parses v and checks lo <= n <= hi, naming the bounds.
	integer := func(name, v string, lo, hi int) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("launch: %s=%q: not an integer (want %d..%d)", name, v, lo, hi)
		}
		if n < lo || n > hi {
			return 0, fmt.Errorf("launch: %s=%d: out of range, want %d..%d", name, n, lo, hi)
		}
		return n, nil
	}
	var e Env
	var src source
	var rankS string
	for _, c := range sources {
		if v, ok := get(c.rank); ok {
			src, rankS = c, v
			break
		}
	}
	if src.name == "" {
		if w, ok := get("WORLD_SIZE"); ok {
			return e, fmt.Errorf("launch: WORLD_SIZE=%s is set but RANK is not", w)
		}
		return e, fmt.Errorf("launch: %w: none of RANK (torchrun, ppgen launch), OMPI_COMM_WORLD_RANK (OpenMPI's mpirun), PMI_RANK (MPICH's mpiexec, srun --mpi=pmi2) or SLURM_PROCID (srun) is set", ErrNotLaunched)
	}
	e.Source = src.name
	var err error
	if e.Rank, err = integer(src.rank, rankS, 0, MaxWorld-1); err != nil {
		return e, err
	}
	worldVar := src.world
	worldS, ok := get(worldVar)
	if !ok && src.name == "slurm" {
		worldVar = "SLURM_NPROCS"
		worldS, ok = get(worldVar)
	}
	if !ok {
		return e, fmt.Errorf("launch: %s=%d is set but %s is not", src.rank, e.Rank, worldVar)
	}
	if e.World, err = integer(worldVar, worldS, 1, MaxWorld); err != nil {
		return e, err
	}
	if e.Rank >= e.World {
		return e, fmt.Errorf("launch: %s=%d is not in [0, %s=%d)", src.rank, e.Rank, worldVar, e.World)
	}
	if v, ok := get(src.local); ok {
		if e.LocalRank, err = integer(src.local, v, 0, e.World-1); err != nil {
			return e, err
		}
	}
	// allLocal: an MPI launcher says every rank runs on this node.
	allLocal := false
	if src.localSize != "" {
		if v, ok := get(src.localSize); ok {
			n, err := integer(src.localSize, v, 1, e.World)
			if err != nil {
				return e, err
			}
			allLocal = n == e.World
		}
	}

	// Rendezvous address.
	if v, ok := get("MASTER_ADDR"); ok {
		e.MasterAddr = v
	} else {
		for _, name := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
			if v, ok := get(name); ok {
				h, err := FirstHost(v)
				if err != nil {
					return e, fmt.Errorf("launch: %s=%q: %v", name, v, err)
				}
				e.MasterAddr = h
				break
			}
		}
	}
	if e.MasterAddr == "" {
		if e.World > 1 && !allLocal {
			return e, fmt.Errorf("launch: MASTER_ADDR is not set (nor a SLURM node list) and %s=%d needs a rendezvous", worldVar, e.World)
		}
		e.MasterAddr = "127.0.0.1"
	}
	if v, ok := get("MASTER_PORT"); ok {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65535 {
			return e, fmt.Errorf("launch: MASTER_PORT=%q: not a port number (1-65535)", v)
		}
		e.MasterPort = p
	} else if v, ok := get("SLURM_JOB_ID"); ok {
		id, err := strconv.ParseUint(v, 10, 31)
		if err != nil {
			return e, fmt.Errorf("launch: SLURM_JOB_ID=%q: not a job number (0..%d; set MASTER_PORT instead)", v, 1<<31-1)
		}
		e.MasterPort = SlurmPort(int(id))
	} else if v, ok := get(ompiJobVar); ok && src.name == "openmpi" {
		id, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return e, fmt.Errorf("launch: %s=%q: not a job number (0..%d; set MASTER_PORT instead)", ompiJobVar, v, uint64(1<<32-1))
		}
		e.MasterPort = SlurmPort(int(id % 20000))
	} else if e.World > 1 {
		return e, fmt.Errorf("launch: MASTER_PORT is not set (nor SLURM_JOB_ID) and %s=%d needs a rendezvous", worldVar, e.World)
	}
	if len(e.MasterAddr) > 255 {
		return e, fmt.Errorf("launch: MASTER_ADDR is %d bytes long; a host name has at most 255", len(e.MasterAddr))
	}
	e.Token, _ = get(TokenVar)
	if len(e.Token) > MaxTokenLen {
		return e, fmt.Errorf("launch: %s is %d bytes long; want at most %d (ppgen launch makes 32 hex digits)", TokenVar, len(e.Token), MaxTokenLen)
	}
	if v, ok := get(AllowNoTokenVar); ok {
		switch strings.ToLower(v) {
		case "1", "true":
			e.AllowNoToken = true
		case "0", "false":
		default:
			return e, fmt.Errorf("launch: %s=%q: want 1 or true (run without a token), or 0 or false", AllowNoTokenVar, v)
		}
	}
	if v, ok := get(PlainFramesVar); ok {
		switch strings.ToLower(v) {
		case "1", "true":
			e.PlainFrames = true
		case "0", "false":
		default:
			return e, fmt.Errorf("launch: %s=%q: want 1 or true (frames without authentication, for trusted networks), or 0 or false", PlainFramesVar, v)
		}
	}
	if e.Timeout, err = timeoutFrom(get); err != nil {
		return e, err
	}
	return e, nil
}

// source is a launcher's variables: rank, world size, local rank and, for
// MPI launchers, the number of ranks on this node.
type source struct {
	name, rank, world, local, localSize string
}

// sources, in precedence order (FromLookup). The MPI launchers come before
// SLURM: mpirun inside an sbatch allocation inherits the batch step's
// SLURM_PROCID (0 on every rank) while OMPI_COMM_WORLD_RANK is each
// process's own.
var sources = []source{
	{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", ""},
	{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
	{"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
	{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", ""},
}

// ompiJobVar is OpenMPI's job number, the same on every rank of a job: the
// rendezvous port under mpirun when MASTER_PORT is not set.
const ompiJobVar = "OMPI_MCA_ess_base_jobid"

// timeoutFrom reads PPGEN_TIMEOUT through get; 0 when unset.
func timeoutFrom(get func(string) (string, bool)) (time.Duration, error) {
	v, ok := get(TimeoutVar)
	if !ok {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("launch: %s=%q: not a duration (want e.g. 90s or 10m)", TimeoutVar, v)
	}
	if d <= 0 || d > MaxTimeout {
		return 0, fmt.Errorf("launch: %s=%v: out of range, want more than 0 and at most %v", TimeoutVar, d, MaxTimeout)
	}
	return d, nil
}

// TimeoutFromEnv reads PPGEN_TIMEOUT alone (0 when unset), for transports
// that take the rank and world size from elsewhere (MPI).
func TimeoutFromEnv() (time.Duration, error) {
	return timeoutFrom(func(name string) (string, bool) {
		v, ok := os.LookupEnv(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	})
}

// MaxTokenLen bounds PPGEN_TOKEN's length.
const MaxTokenLen = 1024

// SlurmPort is the rendezvous port used under SLURM when MASTER_PORT is not
// set: 15000 + job id mod 20000, so concurrent jobs rarely collide.
func SlurmPort(jobID int) int { return 15000 + jobID%20000 }

// FirstHost returns the first host of a SLURM host list such as
// "gpu[01-04,07],cpu3" (-> "gpu01") or "rack[1-2]-n[5-6]" (-> "rack1-n5").
func FirstHost(list string) (string, error) {
	// The first top-level comma-separated element.
	depth, end := 0, len(list)
	for i, c := range list {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
			if depth < 0 {
				return "", errors.New("unbalanced ']'")
			}
		case ',':
			if depth == 0 && end == len(list) {
				end = i
			}
		}
	}
	if depth != 0 {
		return "", errors.New("unbalanced '['")
	}
	elem := list[:end]
	var b strings.Builder
	for {
		i := strings.IndexByte(elem, '[')
		if i < 0 {
			b.WriteString(elem)
			break
		}
		j := strings.IndexByte(elem[i:], ']')
		b.WriteString(elem[:i])
		first := elem[i+1 : i+j]
		if k := strings.IndexAny(first, ",-"); k >= 0 {
			first = first[:k]
		}
		if first == "" {
			return "", errors.New("empty range in brackets")
		}
		b.WriteString(first)
		elem = elem[i+j+1:]
	}
	if b.Len() == 0 {
		return "", errors.New("empty host list")
	}
	return b.String(), nil
}

// jobVars identify a job among the processes of a host: every rank of one
// job has the same values (StoppedPeer).
var jobVars = []string{ompiJobVar, "PMIX_NAMESPACE", "SLURM_JOB_ID", "SLURM_STEP_ID", "MASTER_ADDR", "MASTER_PORT", TokenVar}

// jobKey is the values of jobVars through get, "" when none is set.
func jobKey(get func(string) string) string {
	var b strings.Builder
	set := false
	for _, k := range jobVars {
		v := get(k)
		set = set || v != ""
		b.WriteString(k + "=" + v + "\x00")
	}
	if !set {
		return ""
	}
	return b.String()
}
