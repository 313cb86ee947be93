package emit

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/ppgen/ppgen/gen/ir"
)

// Fingerprint returns "sha256:<hex>" of the canonical text of a lowered
// program: P, S, M, the placement, its ties (when it has any) and, per rank, every step's kind, stage,
// micro, peer and slot (sub-steps of overlaps included). Generated code
// records it as its Fingerprint constant and ranks compare it at the
// rendezvous, so any tool holding the lowered program can recompute it.
func Fingerprint(p ir.Program) string {
	sum := sha256.Sum256(canonical(p))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// canonical writes the program one step per line, "KIND stage micro peer
// slot" with an overlap's sub-steps in brackets after it, under a line per
// rank giving its step count, so that no two programs share a text:
//
//	ppgen lowered program v1
//	ranks 2 stages 2 micro 4
//	placement 0 1
//	rank 0 steps 18
//	DATA_LOAD 0 0 -1 0
//	F 0 0 -1 0
//	...
func canonical(p ir.Program) []byte {
	b := make([]byte, 0, 64+24*p.NumSteps())
	b = append(b, "ppgen lowered program v1\nranks "...)
	b = strconv.AppendInt(b, int64(p.Placement.NumRanks), 10)
	b = append(b, " stages "...)
	b = strconv.AppendInt(b, int64(p.Stages()), 10)
	b = append(b, " micro "...)
	b = strconv.AppendInt(b, int64(p.Micro), 10)
	b = append(b, "\nplacement"...)
	for _, r := range p.Placement.RankOf {
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(r), 10)
	}
	b = append(b, '\n')
	if len(p.Ties) > 0 {
		// Which stages pair up is not in the steps (only which ones take
		// part); a program without ties writes no line, so its text stays.
		b = append(b, "ties"...)
		for _, t := range p.Ties {
			b = append(b, ' ')
			b = append(b, t.String()...)
		}
		b = append(b, '\n')
	}
	for r, steps := range p.Ranks {
		b = append(b, "rank "...)
		b = strconv.AppendInt(b, int64(r), 10)
		b = append(b, " steps "...)
		b = strconv.AppendInt(b, int64(len(steps)), 10)
		b = append(b, '\n')
		for _, st := range steps {
			b = appendStep(b, st)
			b = append(b, '\n')
		}
	}
	return b
}

func appendStep(b []byte, st ir.Step) []byte {
	b = append(b, st.Kind.String()...)
	for _, v := range [...]int{st.Stage, st.Micro, st.Peer, st.Slot} {
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(v), 10)
	}
	for _, sub := range st.Sub {
		b = append(b, " ["...)
		b = appendStep(b, sub)
		b = append(b, ']')
	}
	return b
}
