// Package deps is the one dependency model of gen: what a compute step
// consumes, and from whom. [Of] answers it for one step and [Neighbour] for
// its one cross-stage input ([Consumer] the other way round); [Counterpart]
// names the transfer a send or receive meets. gen/verify (the waits of the strict model, the order
// preconditions, the matching of transfers), gen/sim (each compute step's
// dependencies), gen/passes (the ideal timeline of the timed comm order,
// the receives and colocated slot sources) and gen/schedules (the
// zero-bubble W fill) all take their dependencies from it.
//
// The model, for chunk (s, m) with m's route first..last (ir.Program.Route)
// and stage s on rank rankOf[s]:
//
//   - F(s, m) consumes, when s > first, the activation of F(s-1, m) (carried
//     by RECV_F when the two stages live on different ranks) and the labels
//     shipped by DATA_SEND(s-1, m) (DATA_RECV, when the program ships
//     labels); at s == first, the input micro m's owner loaded and shipped
//     (MPIPE_FWD_RECV, when the program has owned inputs, mpipe);
//   - B(s, m) and I(s, m) consume the saved activations of F(s, m) on their
//     own rank and, when s < last, the gradient of the backward of (s+1, m),
//     its B or I (carried by RECV_B across ranks);
//   - W(s, m) consumes what I(s, m) kept, on its own rank (a W after a full B
//     is an order error in gen/verify: B already computed the weight
//     gradient; gen/sim, which times programs verify rejects, falls back to
//     the B there).
//
// What the model leaves to each user, because it is a property of the rank's
// program order rather than of the data: DATA_LOAD before the step that uses
// it, UNSHARD before compute on its stage (verify's FSDP walk, sim's gather
// lane), SWAP_WAIT_* after its launch, slot reuse, and the FIFO matching of
// transfers per (source, destination, channel) (verify's match, sim's
// matchComm; verify then checks that FIFO meets each transfer's
// Counterpart).
package deps

import "github.com/ppgen/ppgen/gen/ir"

// What names the value an input carries.
type What uint8

// The inputs of a compute step.
const (
	// Activation is F(s, m)'s input: the output of F(s-1, m).
	Activation What = iota
	// Labels are the labels (and masks) shipped along the pipeline by
	// DATA_SEND(s-1, m); a program without DATA_RECV loads them instead.
	Labels
	// Owned is the input of an mpipe micro-batch, loaded by its owner and
	// shipped by MPIPE_FWD_SEND; a program without MPIPE_FWD_RECV loads it.
	Owned
	// Saved is a backward's own forward F(s, m): the saved activations.
	Saved
	// Gradient is B/I(s, m)'s output gradient: the input gradient the
	// backward of (s+1, m) computed.
	Gradient
	// Kept is what W(s, m) consumes from I(s, m).
	Kept
)

var whatNames = [...]string{"activation", "labels", "owned input", "saved activations", "gradient", "kept by I"}

// String names the value ("activation", "gradient", ...).
func (w What) String() string {
	if int(w) < len(whatNames) {
		return whatNames[w]
	}
	return "What(?)"
}

// Input is one value a compute step consumes.
type Input struct {
	What What
	// Kind, Stage and Micro name the producing step: Forward, BackwardInput,
	// or Backward for "the chunk's backward, B or I, whichever it runs"; for
	// Labels and Owned, the send on the peer (DATA_SEND, MPIPE_FWD_SEND).
	Kind         ir.Kind
	Stage, Micro int
	// Rank is the rank that runs the producer (ir.None when the placement
	// names none).
	Rank int
	// Recv is the receive, on the consumer's rank and of the consumer's
	// chunk, that carries the value over a transfer: RECV_F, RECV_B,
	// DATA_RECV, MPIPE_FWD_RECV; ir.Invalid for the local inputs Saved and
	// Kept.
	Recv ir.Kind
	// Act is the stage whose output activation sizes the transfer (the
	// producer's for an activation, the consumer's for a gradient); -1 for
	// the other inputs.
	Act int
}

// Optional reports whether the input exists only in programs that hold its
// receive (Labels, Owned): a program without it loads the value on the
// consumer's rank with DATA_LOAD instead.
func (in Input) Optional() bool { return in.What == Labels || in.What == Owned }

// Remote reports whether the input reaches a consumer on rank r over a
// transfer (its Recv): whether the producer runs on another rank.
func (in Input) Remote(r int) bool { return in.Recv != ir.Invalid && in.Rank != r }

// MaxInputs is the most inputs Of returns for one step (F past its first
// stage: the activation and the labels; B and I: the saved activations and
// the gradient), so that a caller can pass a fixed array's slice.
const MaxInputs = 2

// Of appends to dst the inputs of compute step cs (F, B, I or W; an
// overlap's sub-steps one at a time) of program p, in a fixed order: for F
// the activation and the labels, or (on the first stage) the owned input;
// for B and I the saved
// activations, then the gradient; for W what its I kept. Steps of other kinds
// consume nothing here. Stages outside the placement give producers on rank
// ir.None; Of never panics. Of and Neighbour take the step by pointer (an
// ir.Step is eight words, copied on every call otherwise) and keep nothing
// of it.
func Of(p *ir.Program, cs *ir.Step, dst []Input) []Input {
	s, m := cs.Stage, cs.Micro
	switch cs.Kind {
	case ir.Forward:
		// Neighbour's Forward case written out, so that the route is read once.
		if first := firstOf(p, m); s > first {
			// Past the first stage: the activation, and the labels the
			// previous stage may ship along.
			r := rankOf(p, s-1)
			dst = append(dst,
				Input{What: Activation, Kind: ir.Forward, Stage: s - 1, Micro: m, Rank: r, Recv: ir.RecvF, Act: s - 1},
				Input{What: Labels, Kind: ir.DataSend, Stage: s - 1, Micro: m, Rank: r, Recv: ir.DataRecv, Act: -1})
		} else if s == first {
			dst = append(dst, Input{What: Owned, Kind: ir.MpipeSend, Stage: s, Micro: m, Rank: p.Placement.Owner(m), Recv: ir.MpipeRecv, Act: -1})
		}
	case ir.Backward, ir.BackwardInput:
		dst = append(dst, Input{What: Saved, Kind: ir.Forward, Stage: s, Micro: m, Rank: rankOf(p, s), Recv: ir.Invalid, Act: -1})
		if last := lastOf(p, m); s < last {
			dst = append(dst, Input{What: Gradient, Kind: ir.Backward, Stage: s + 1, Micro: m, Rank: rankOf(p, s+1), Recv: ir.RecvB, Act: s})
		}
	case ir.BackwardWeight:
		dst = append(dst, Input{What: Kept, Kind: ir.BackwardInput, Stage: s, Micro: m, Rank: rankOf(p, s), Recv: ir.Invalid, Act: -1})
	}
	return dst
}

// Recvs returns the receives on rank r that bring compute step cs's
// inputs from other ranks: the Recv of each entry of Of with Remote(r),
// in Of's order, ir.Invalid where there are fewer than two. It is Of for
// the loops that ask it of every step (the verifier's strict model waits
// for these receives), in registers: it builds no Input.
func Recvs(p *ir.Program, cs *ir.Step, r int) (a, b ir.Kind) {
	s, m := cs.Stage, cs.Micro
	first, last := routeEnds(p, m)
	if stage, grad, ok := Cross(cs.Kind, s, first, last); ok {
		if rankOf(p, stage) != r {
			return RemoteRecvs(grad) // the saved activations and the kept are local
		}
	} else if cs.Kind == ir.Forward && s == first && p.Placement.Owner(m) != r {
		return ir.MpipeRecv, ir.Invalid
	}
	return ir.Invalid, ir.Invalid
}

// RemoteRecvs returns, for Cross's grad, the receives that bring a
// cross-stage input produced on another rank (Recvs): the input's own
// (AcrossKinds' recv: RECV_B for the gradient, RECV_F for the activation)
// and, with the activation, the labels' DATA_RECV (ir.Invalid for the
// gradient).
func RemoteRecvs(grad bool) (a, b ir.Kind) {
	if grad {
		return ir.RecvB, ir.Invalid
	}
	return ir.RecvF, ir.DataRecv // the activation, then the labels
}

// Cross is the model's cross-stage input by values, for a caller that
// knows the route first..last (ir.Program.Route) of the step's
// micro-batch and reads the producer's rank itself: for a compute step of
// kind k on stage s, the stage that produces its cross-stage input
// (Neighbour) and whether the input is the Gradient (else the
// Activation); ok is false at the route's ends and for other kinds.
// Recvs answers through it, and Across as it (TestOf holds them to each
// other); it inlines, so a loop that asks it of every step pays no call.
func Cross(k ir.Kind, s, first, last int) (stage int, grad, ok bool) {
	switch k {
	case ir.Forward:
		return s - 1, false, s > first
	case ir.Backward, ir.BackwardInput:
		return s + 1, true, s < last
	}
	return 0, false, false
}

// Neighbour returns the one input of compute step cs that another stage
// produces: for F(s, m) the Activation of F(s-1, m), for B(s, m) and I(s, m)
// the Gradient of the backward of (s+1, m); ok is false at the ends of m's
// route (its first stage for F, its last for a backward) and for other
// kinds. It is the Activation or Gradient entry of Of, and Across as an
// Input.
func Neighbour(p *ir.Program, cs *ir.Step) (in Input, ok bool) {
	stage, rank, act, grad, ok := Across(p, cs)
	switch {
	case !ok:
		return Input{}, false
	case grad:
		return Input{What: Gradient, Kind: ir.Backward, Stage: stage, Micro: cs.Micro, Rank: rank, Recv: ir.RecvB, Act: act}, true
	}
	return Input{What: Activation, Kind: ir.Forward, Stage: stage, Micro: cs.Micro, Rank: rank, Recv: ir.RecvF, Act: act}, true
}

// Across is Neighbour as plain values, for the loops that ask it of every
// step (the verifier's walk, the slots pass, the ideal timeline): the stage
// that produces cs's cross-stage input, that stage's rank, the stage whose
// activation sizes the transfer (Input.Act), and whether the input is the
// Gradient (else the Activation); ok is false where Neighbour's is. An
// Input has seven fields, so a caller keeps it in memory, and reading it
// back right after the call stored it costs a store-forwarding stall;
// plain values stay in registers. AcrossKinds names the producing step's
// kind and the receive that carries the input.
//
// It is Cross with the route's end it needs and the producer's rank
// (written out: Cross would have it read both ends of the route, which
// costs the passes that call it on every step); TestOf holds the two to
// each other.
func Across(p *ir.Program, cs *ir.Step) (stage, rank, act int, grad, ok bool) {
	s, m := cs.Stage, cs.Micro
	switch cs.Kind {
	case ir.Forward:
		if s > firstOf(p, m) {
			return s - 1, rankOf(p, s-1), s - 1, false, true
		}
	case ir.Backward, ir.BackwardInput:
		if s < lastOf(p, m) {
			return s + 1, rankOf(p, s+1), s, true, true
		}
	}
	return 0, ir.None, -1, false, false
}

// AcrossKinds returns, for Across's grad, the kind of the step producing
// the input (Neighbour's Kind) and of the receive that brings it from
// another rank (its Recv).
func AcrossKinds(grad bool) (producer, recv ir.Kind) {
	if grad {
		return ir.Backward, ir.RecvB
	}
	return ir.Forward, ir.RecvF
}

// ConsumerRank returns the rank that runs the step of another stage whose
// cross-stage input compute step cs produces (F(s+1, m) for F(s, m) when
// s < last; for B(s, m) or I(s, m) when s > first, the backward of
// (s-1, m)), the inverse of Neighbour; ok is false when there is none. It
// inlines and builds no step.
func ConsumerRank(p *ir.Program, cs ir.Step) (rank int, ok bool) {
	_, _, rank, ok = consumerOf(p, cs.Kind, cs.Stage, cs.Micro)
	return rank, ok
}

// consumerOf is the body of ConsumerRank (and of the tests' Consumer),
// its results in the registers of a call.
func consumerOf(p *ir.Program, kind ir.Kind, s, m int) (k ir.Kind, stage, rank int, ok bool) {
	switch kind {
	case ir.Forward:
		if last := lastOf(p, m); s < last {
			return ir.Forward, s + 1, rankOf(p, s+1), true
		}
	case ir.Backward, ir.BackwardInput:
		if first := firstOf(p, m); s > first {
			return ir.Backward, s - 1, rankOf(p, s-1), true
		}
	}
	return ir.Invalid, 0, ir.None, false
}

// firstOf, lastOf and routeEnds are the ends of m's route, p.Route
// without its arithmetic for one pipeline (the hot case: the model runs
// once per step in verify, sim and the passes); they inline, routeOf does
// not.
func firstOf(p *ir.Program, m int) int {
	if p.Copies <= 1 {
		return 0
	}
	first, _ := routeOf(p, m)
	return first
}

func lastOf(p *ir.Program, m int) int {
	if p.Copies <= 1 {
		return len(p.Placement.RankOf) - 1
	}
	_, last := routeOf(p, m)
	return last
}

func routeEnds(p *ir.Program, m int) (first, last int) {
	if last = len(p.Placement.RankOf) - 1; p.Copies > 1 {
		first, last = routeOf(p, m)
	}
	return first, last
}

//go:noinline
func routeOf(p *ir.Program, m int) (first, last int) { return p.Route(m) }

func rankOf(p *ir.Program, s int) int {
	if s < 0 || s >= len(p.Placement.RankOf) {
		return ir.None
	}
	return p.Placement.RankOf[s]
}

// Counterpart returns the step transfer st pairs with on its peer (Peer
// not set): SEND_F(s, m) with RECV_F(s+1, m), SEND_B(s, m) with
// RECV_B(s-1, m), DATA_SEND(s, m) with DATA_RECV(s+1, m), MPIPE_FWD_SEND(s,
// m) with MPIPE_FWD_RECV(s, m), and each receive with its send; st itself
// for other kinds. Which of the peer's transfers it meets is FIFO per
// (source, destination, channel): gen/verify checks that FIFO meets the
// counterpart.
func Counterpart(st ir.Step) ir.Step {
	k, ds := CounterpartOf(st.Kind)
	if k == ir.Invalid {
		return st
	}
	return ir.Compute(k, st.Stage+ds, st.Micro)
}

// CounterpartOf is Counterpart by kind, for a caller that holds the step
// behind a pointer (an ir.Step is too large to pass cheaply): the
// counterpart of a transfer of kind k on (s, m) is the transfer of kind
// kind on (s+dStage, m); ir.Invalid and 0 for other kinds.
func CounterpartOf(k ir.Kind) (kind ir.Kind, dStage int) {
	c := counterparts[k]
	return c.kind, int(c.ds)
}

// counterparts holds, per kind value, the kind of the transfer's
// counterpart and its stage offset (ir.Invalid: not a transfer), indexed by
// the value itself so that Counterpart is one load and inlines.
var counterparts = [256]struct {
	kind ir.Kind
	ds   int8
}{
	ir.SendF:     {ir.RecvF, +1},
	ir.RecvF:     {ir.SendF, -1},
	ir.SendB:     {ir.RecvB, -1},
	ir.RecvB:     {ir.SendB, +1},
	ir.DataSend:  {ir.DataRecv, +1},
	ir.DataRecv:  {ir.DataSend, -1},
	ir.MpipeSend: {ir.MpipeRecv, 0},
	ir.MpipeRecv: {ir.MpipeSend, 0},
}
