package pipe

import "github.com/ppgen/ppgen/abi"

// DecodeOps returns one rank's program as data from the compact form
// generated code writes with -table (a []Op literal with six keyed fields
// per step costs the Go compiler five times as much): kinds holds each op's
// kind as its Code letter, ats its fields packed as for the step's method
// (see At): (peer, slot) for the transfers, (slot, src) for the others, -1
// where unused; OPT_STEP and an overlap's header have every field -1. An op
// whose letter is unknown, or that is beyond the shorter of kinds and ats,
// becomes an OpInvalid op, which Interpret reports.
func DecodeOps(kinds string, ats []At) []Op {
	ops := make([]Op, max(len(kinds), len(ats)))
	for i := range ops {
		o := &ops[i]
		if i >= len(kinds) || i >= len(ats) {
			*o = Op{Kind: OpInvalid, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1}
			continue
		}
		o.Kind = abi.KindOfCode(kinds[i])
		stage, micro, peer, slot, src := ats[i].Operands(o.Kind)
		o.Stage, o.Micro, o.Peer, o.Slot, o.Src = int32(stage), int32(micro), int32(peer), int32(slot), int32(src)
	}
	return ops
}
