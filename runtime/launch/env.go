// Package launch starts ranks and tells each rank who it is.
//
// [FromEnv] reads the rank, world size and rendezvous address the way
// torchrun and most launchers set them (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, LOCAL_RANK), falling back to SLURM's variables (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, the first host of SLURM_JOB_NODELIST, a port
// derived from SLURM_JOB_ID) under srun. The shared token for the TCP
// handshake comes from PPGEN_TOKEN.
//
// [Local] runs N copies of a command on this machine with those variables
// set, prefixes their output with "[rank N] ", reports every exit status, and
// when one rank fails gives the others a grace period to fail on their own
// (they do: their transports name the failed rank) before killing them.
package launch

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/runtime/transport"
)

// Env is one rank's view of the job.
type Env struct {
	Rank       int    // global rank
	World      int    // number of ranks
	LocalRank  int    // rank on this node (0 when the launcher does not say)
	MasterAddr string // host of rank 0's rendezvous listener
	MasterPort int    // its port
	Token      string // shared secret for the TCP handshake (PPGEN_TOKEN), may be empty
	Source     string // "torchrun" (RANK, WORLD_SIZE, ...) or "slurm"
}

// Addr returns MasterAddr:MasterPort.
func (e Env) Addr() string { return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.MasterPort)) }

// TCPConfig returns a transport configuration for this rank with the given
// schedule fingerprint; callers may adjust timeouts before DialTCP.
func (e Env) TCPConfig(fingerprint string) transport.TCPConfig {
	return transport.TCPConfig{Rank: e.Rank, World: e.World, MasterAddr: e.Addr(), Token: e.Token, Fingerprint: fingerprint}
}

// ErrNotLaunched is returned (wrapped) by FromEnv when neither torchrun-style
// nor SLURM variables are set: the process was started by hand. Trainers may
// fall back to a single rank.
var ErrNotLaunched = errors.New("not started by a launcher")

// TokenVar is the environment variable holding the shared token.
const TokenVar = "PPGEN_TOKEN"

// FromEnv reads the process environment. See FromLookup.
func FromEnv() (Env, error) { return FromLookup(os.LookupEnv) }

// FromLookup reads the job description through lookup (os.LookupEnv in
// FromEnv). torchrun-style variables win over SLURM's; errors name the
// variable and its value.
func FromLookup(lookup func(string) (string, bool)) (Env, error) {
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	integer := func(name, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("launch: %s=%q: not an integer", name, v)
		}
		return n, nil
	}
	var e Env
	rankVar, worldVar, localVar := "RANK", "WORLD_SIZE", "LOCAL_RANK"
	rankS, hasRank := get("RANK")
	e.Source = "torchrun"
	if !hasRank {
		if rankS, hasRank = get("SLURM_PROCID"); hasRank {
			rankVar, worldVar, localVar = "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"
			e.Source = "slurm"
		}
	}
	if !hasRank {
		if w, ok := get("WORLD_SIZE"); ok {
			return e, fmt.Errorf("launch: WORLD_SIZE=%s is set but RANK is not", w)
		}
		return e, fmt.Errorf("launch: %w: neither RANK (torchrun, ppgen launch) nor SLURM_PROCID (srun) is set", ErrNotLaunched)
	}
	var err error
	if e.Rank, err = integer(rankVar, rankS); err != nil {
		return e, err
	}
	worldS, ok := get(worldVar)
	if !ok && e.Source == "slurm" {
		worldVar = "SLURM_NPROCS"
		worldS, ok = get(worldVar)
	}
	if !ok {
		return e, fmt.Errorf("launch: %s=%d is set but %s is not", rankVar, e.Rank, worldVar)
	}
	if e.World, err = integer(worldVar, worldS); err != nil {
		return e, err
	}
	if e.World < 1 {
		return e, fmt.Errorf("launch: %s=%d: must be at least 1", worldVar, e.World)
	}
	if e.Rank < 0 || e.Rank >= e.World {
		return e, fmt.Errorf("launch: %s=%d is not in [0, %s=%d)", rankVar, e.Rank, worldVar, e.World)
	}
	if v, ok := get(localVar); ok {
		if e.LocalRank, err = integer(localVar, v); err != nil {
			return e, err
		}
		if e.LocalRank < 0 {
			return e, fmt.Errorf("launch: %s=%d: negative", localVar, e.LocalRank)
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
		if e.World > 1 {
			return e, fmt.Errorf("launch: MASTER_ADDR is not set (nor a SLURM node list) and WORLD_SIZE=%d needs a rendezvous", e.World)
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
		id, err := strconv.Atoi(v)
		if err != nil || id < 0 {
			return e, fmt.Errorf("launch: SLURM_JOB_ID=%q: not a job number (set MASTER_PORT instead)", v)
		}
		e.MasterPort = SlurmPort(id)
	} else if e.World > 1 {
		return e, fmt.Errorf("launch: MASTER_PORT is not set (nor SLURM_JOB_ID) and WORLD_SIZE=%d needs a rendezvous", e.World)
	}
	e.Token, _ = get(TokenVar)
	return e, nil
}

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
