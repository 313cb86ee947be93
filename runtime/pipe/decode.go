package pipe

// opCodes are the letters of the op kinds in the kinds string of DecodeOps.
var opCodes = [numOpKinds]byte{
	OpDataLoad:          'L',
	OpRecvAct:           'r',
	OpSendAct:           's',
	OpRecvGrad:          'R',
	OpSendGrad:          'S',
	OpForward:           'F',
	OpBackward:          'B',
	OpBackwardInput:     'I',
	OpBackwardWeight:    'W',
	OpOptStep:           'O',
	OpOverlapFB:         'X',
	OpOverlapBF:         'Y',
	OpUnshard:           'U',
	OpReshard:           'u',
	OpReduceGrad:        'G',
	OpSwapLaunchOffload: 'J',
	OpSwapWaitOffload:   'j',
	OpSwapLaunchLoad:    'K',
	OpSwapWaitLoad:      'k',
	OpRecvInput:         'M',
	OpSendInput:         'm',
	OpRecvData:          'T',
	OpSendData:          't',
}

// Code returns the kind's letter in a DecodeOps kinds string ("F", "s" for
// SEND_F, ...), or 0 for OpInvalid and unknown kinds.
func (k OpKind) Code() byte {
	if k < numOpKinds {
		return opCodes[k]
	}
	return 0
}

// OpKindOfCode returns the kind whose Code is c, or OpInvalid.
func OpKindOfCode(c byte) OpKind {
	for k, code := range opCodes {
		if code == c && code != 0 {
			return OpKind(k)
		}
	}
	return OpInvalid
}

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
		o.Kind = OpKindOfCode(kinds[i])
		stage, micro, c, d := ats[i].Unpack()
		o.Stage, o.Micro = int32(stage), int32(micro)
		switch o.Kind {
		case OpRecvAct, OpSendAct, OpRecvGrad, OpSendGrad, OpRecvInput, OpSendInput, OpRecvData, OpSendData:
			o.Peer, o.Slot, o.Src = int32(c), int32(d), -1
		default:
			o.Peer, o.Slot, o.Src = -1, int32(c), int32(d)
		}
	}
	return ops
}
