package sim

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
)

// ErrStuck is wrapped by every error saying that a program cannot complete
// (a deadlock, an unmatched transfer, a step waiting for one that never runs).
var ErrStuck = errors.New("program cannot complete")

// DeadlockError reports a program whose simulation stopped with ranks that
// still have steps left. It wraps ErrStuck.
type DeadlockError struct {
	Stuck []Stuck // the ranks that did not finish, in rank order
}

// Stuck is the state of one rank that did not finish.
type Stuck struct {
	Rank int
	// Host is the index of the step the host is blocked at, or the length
	// of the rank's program when the host reached its end.
	Host     int
	HostStep ir.Step // the step at Host (zero when the host is done)
	// HostWaits says what the host step waits for ("" when the host is done).
	HostWaits string
	// Comm is the index of the first transfer of the rank that did not
	// complete (the head of its comm stream), or -1 when all completed.
	Comm     int
	CommStep ir.Step // the step at Comm (zero when Comm is -1)
	// PeerRank and PeerIndex locate the half matched to CommStep on its peer.
	PeerRank, PeerIndex int
	// CommWaits says why the head transfer cannot complete ("" when Comm is -1).
	CommWaits string
}

func (e *DeadlockError) Error() string {
	var b strings.Builder
	b.WriteString("sim: program cannot complete (deadlock under the strict model); ")
	b.WriteString(fmt.Sprintf("%d stuck rank(s): ", len(e.Stuck)))
	const limit = 8
	for i, s := range e.Stuck {
		if i == limit {
			b.WriteString(fmt.Sprintf("; and %d more", len(e.Stuck)-limit))
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(s.String())
	}
	return b.String()
}

// Unwrap returns ErrStuck.
func (e *DeadlockError) Unwrap() error { return ErrStuck }

// String describes the stuck rank in one line.
func (s Stuck) String() string {
	var parts []string
	if s.HostWaits != "" {
		parts = append(parts, fmt.Sprintf("host blocked at step %d %s, %s", s.Host, s.HostStep, s.HostWaits))
	} else {
		parts = append(parts, "host done")
	}
	if s.Comm >= 0 {
		parts = append(parts, fmt.Sprintf("comm head step %d %s %s", s.Comm, s.CommStep, s.CommWaits))
	}
	return fmt.Sprintf("rank %d: %s", s.Rank, strings.Join(parts, "; "))
}

// stuck returns a DeadlockError when some rank did not finish.
func (s *simulator) stuck() error {
	var out []Stuck
	for r := range s.ranks {
		rs := &s.ranks[r]
		if rs.host == rs.n && rs.commPos == len(rs.comm) {
			continue
		}
		st := Stuck{Rank: r, Host: rs.host, Comm: -1, PeerRank: -1, PeerIndex: -1}
		if rs.host < rs.n {
			e := rs.off + rs.host
			st.HostStep = s.ev[e].Step
			st.HostWaits = s.hostWaits(e)
		}
		if rs.commPos < len(rs.comm) {
			i := rs.comm[rs.commPos]
			e := rs.off + i
			m := s.match[e]
			q := s.ev[m].Rank
			qs := &s.ranks[q]
			st.Comm, st.CommStep = i, s.ev[e].Step
			st.PeerRank, st.PeerIndex = q, m-qs.off
			partner := fmt.Sprintf("its partner %s (rank %d step %d)", s.ev[m].Step, q, st.PeerIndex)
			switch {
			case i >= rs.host:
				st.CommWaits = "is not posted yet (the host has not reached it)"
			case qs.comm[qs.commPos] != st.PeerIndex:
				head := qs.comm[qs.commPos]
				st.CommWaits = fmt.Sprintf("waits for %s, which is queued behind rank %d's comm head step %d %s", partner, q, head, s.p.Ranks[q][head])
			default:
				st.CommWaits = fmt.Sprintf("waits for %s, which rank %d's host has not posted (blocked at step %d)", partner, q, qs.host)
			}
		}
		out = append(out, st)
	}
	if len(out) == 0 {
		return nil
	}
	return &DeadlockError{Stuck: out}
}

func (s *simulator) hostWaits(e int) string {
	var waits []string
	for _, d := range s.deps[e] {
		switch {
		case d.ev < 0:
			waits = append(waits, d.why)
		case !s.done[d.ev]:
			w := s.ev[d.ev]
			state := "not run yet"
			if s.cls[d.ev] == clComm {
				state = "not complete"
			}
			waits = append(waits, fmt.Sprintf("waits for %s (rank %d step %d), %s", w.Step, w.Rank, w.Index, state))
		}
	}
	if s.cls[e] == clMeet && s.peers != nil {
		for _, pe := range s.peers[e] {
			if pe < 0 {
				waits = append(waits, fmt.Sprintf("waits for a rank that never posts its %s", s.ev[e].Step))
				continue
			}
			if qs := &s.ranks[s.ev[pe].Rank]; !s.done[pe] && qs.host < pe-qs.off {
				waits = append(waits, fmt.Sprintf("waits for rank %d to reach its %s (step %d), blocked at step %d", s.ev[pe].Rank, s.ev[pe].Step, s.ev[pe].Index, qs.host))
			}
		}
	}
	if len(waits) == 0 {
		return "ready" // cannot happen once run has finished
	}
	return strings.Join(waits, ", and ")
}
