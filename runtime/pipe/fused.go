package pipe

// The fused steps: two adjacent steps of one chunk in one call, the form
// generated code uses for the pairs that make up most of a pipeline rank's
// program (a forward and the send of its output, a receive and the compute
// that consumes it, ...). They do exactly what the two calls do, in order;
// fusing only halves the calls, which is what `go build` time of generated
// code grows with. The peer is not passed: it is the rank that Spec.RankOf
// places the neighbour stage on, which is what the unfused call must name.
// a holds the compute step's stage, micro-batch, slot and src (-1 after a
// receive, whose data the compute consumes).

// FAndSend runs F(a), then SendF of the chunk's output to the next stage's
// rank ("sF m; sSEND_F m").
//
//go:noinline
func (x *Exec) FAndSend(a At) { x.F(a); x.SendF(x.transferAt(a, +1)) }

// RecvAndF posts RecvF of the chunk's input from the previous stage's rank
// into the slot, then runs F(a) on it ("sRECV_F m; sF m").
//
//go:noinline
func (x *Exec) RecvAndF(a At) { x.RecvF(x.transferAt(a, -1)); x.F(a) }

// RecvAndB posts RecvB of the chunk's output gradient from the next stage's
// rank, then runs B(a) on it ("sRECV_B m; sB m").
//
//go:noinline
func (x *Exec) RecvAndB(a At) { x.RecvB(x.transferAt(a, +1)); x.B(a) }

// BAndSend runs B(a), then SendB of the chunk's input gradient to the
// previous stage's rank ("sB m; sSEND_B m").
//
//go:noinline
func (x *Exec) BAndSend(a At) { x.B(a); x.SendB(x.transferAt(a, -1)) }

// RecvAndI posts RecvB, then runs I(a) ("sRECV_B m; sI m").
//
//go:noinline
func (x *Exec) RecvAndI(a At) { x.RecvB(x.transferAt(a, +1)); x.I(a) }

// IAndSend runs I(a), then SendB ("sI m; sSEND_B m").
//
//go:noinline
func (x *Exec) IAndSend(a At) { x.I(a); x.SendB(x.transferAt(a, -1)) }

// LabelsAndSendF posts DataSend then SendF of the chunk to the next
// stage's rank ("sDATA_SEND m; sSEND_F m", with -ship-labels). a is (stage,
// micro, slot, -1), as for a compute step.
//
//go:noinline
func (x *Exec) LabelsAndSendF(a At) { t := x.transferAt(a, +1); x.DataSend(t); x.SendF(t) }

// LabelsAndRecvF posts DataRecv then RecvF of the chunk from the previous
// stage's rank ("sDATA_RECV m; sRECV_F m"). a as for LabelsAndSendF.
//
//go:noinline
func (x *Exec) LabelsAndRecvF(a At) { t := x.transferAt(a, -1); x.DataRecv(t); x.RecvF(t) }

// transferAt is the At of the transfer of a's chunk with stage+dir: (stage,
// micro, peer, slot), peer the rank Spec.RankOf places that stage on, or -1
// when there is no such stage (which the transfer then reports).
func (x *Exec) transferAt(a At, dir int) At {
	stage, _, _, _ := a.Unpack()
	peer := -1
	if other := stage + dir; other >= 0 && other < len(x.spec.RankOf) {
		peer = x.spec.RankOf[other]
	}
	// Keep stage and micro, move the slot to the low field, the peer
	// above it.
	return a&^0xffff_ffff | At(uint64(peer)&atNone)<<16 | a>>16&atNone
}
