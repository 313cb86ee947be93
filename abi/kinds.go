package abi

import "fmt"

// Kind is the kind of one step of a rank's program (docs/design.md §3). Its
// String form is the step's name in schedule text, PyTorch's pipelining
// action names ("F", "I", "W", "B", "SEND_F", "UNSHARD", ...) with ppgen's
// own kinds spelled the same way.
type Kind uint8

// The step kinds. The order is the order Kinds lists them in; nothing
// outside a process depends on the numeric values (generated code names the
// kinds, and tables store their letters).
const (
	Invalid           Kind = iota
	Forward                // F: forward of (stage, micro)
	Backward               // B: full backward (input and weight gradients)
	BackwardInput          // I: backward for the input gradient (dx)
	BackwardWeight         // W: backward for the weight gradient (dw)
	SendF                  // SEND_F: activation to the next stage's rank
	RecvF                  // RECV_F: activation from the previous stage's rank
	SendB                  // SEND_B: gradient to the previous stage's rank
	RecvB                  // RECV_B: gradient from the next stage's rank
	DataLoad               // DATA_LOAD: take a micro-batch from the data iterator
	DataSend               // DATA_SEND: ship labels/masks of a micro along the pipe
	DataRecv               // DATA_RECV: receive labels/masks of a micro
	Unshard                // UNSHARD: all-gather a stage's FSDP-sharded parameters
	Reshard                // RESHARD: free a stage's gathered parameters
	ReduceGrad             // REDUCE_GRAD: reduce-scatter a stage's gradients
	SwapLaunchOffload      // SWAP_LAUNCH_OFFLOAD: start moving saved activations out
	SwapWaitOffload        // SWAP_WAIT_OFFLOAD: finish moving them out
	SwapLaunchLoad         // SWAP_LAUNCH_LOAD: start bringing them back
	SwapWaitLoad           // SWAP_WAIT_LOAD: finish bringing them back
	OverlapFB              // OVERLAP_F_B: a forward and a backward run together
	OverlapBF              // OVERLAP_B_F: a backward and a forward run together
	OptStep                // OPT_STEP: optimizer update of the rank's stages
	MpipeSend              // MPIPE_FWD_SEND: an owner rank ships a micro's loaded input to the stage's rank (mpipe)
	MpipeRecv              // MPIPE_FWD_RECV: the stage's rank receives it from the micro's owner
	BatchBegin             // BATCH_BEGIN: the transfers up to BATCH_END are one batch (coalesced)
	BatchEnd               // BATCH_END: closes the batch BATCH_BEGIN opened; the runtime issues it as one group
	TieGrad                // TIE_GRAD: sum a tied parameter's gradients with the other stage of its tie (-tie A:B)
	AllReduce              // ALL_REDUCE: a reduction across every rank, which all post in the same order (-clip: the global gradient norm)
	Recompute              // RECOMPUTE: rebuild the saved activations of (stage, micro), which its F dropped, before its backward (-recompute)
	GatherLoss             // GATHER_LOSS: every rank gets every micro-batch's loss, which all post in the same order (-gather-loss)
	numKinds
)

// row is everything the two sides agree on about one kind. A kind has a
// text name (PyTorch's where PyTorch has the kind) and a Go name, the
// identifier of its constant here, in gen/ir and, with "Op" in front, in
// runtime/pipe. The pipe.Exec method generated code calls for it is named
// here too: gen/emit writes it, gen/vet reads it back and runtime/pipe's
// interpreter table is generated from it. The method is the Go name, or the
// text name for the compute steps (x.F, x.B, x.I, x.W), so a kind has no
// third spelling; a method's name is in generated code, so renaming one
// takes a new Version.
type row struct {
	name    string   // schedule text form
	goName  string   // Go identifier of the constant (TestGoNames checks it)
	method  string   // the pipe.Exec method generated code calls for a step of the kind
	code    byte     // letter in a pipe.DecodeOps kinds string; 0 for Invalid
	shape   Shape    // the operands a step of the kind carries
	channel Channel  // the FIFO a transfer travels on; NoChannel for local steps
	class   class    // compute, backward, send, recv, FSDP, swap, rendezvous, collective, rebuild
	aliases []string // other spellings the parser accepts
}

// class is a set of the flags a kind's predicates read.
type class uint16

const (
	compute    class = 1 << iota // runs model compute (IsCompute)
	backward                     // produces a stage's input gradient (IsBackward)
	send                         // the sending half of a transfer (IsSend)
	recv                         // the receiving half of a transfer (IsRecv)
	fsdp                         // an FSDP step of a stage's parameters (IsFSDP)
	swap                         // a step of activation swapping (IsSwap)
	stage                        // names a stage (HasStage), derived from the shape
	micro                        // names a micro-batch (HasMicro), derived from the shape
	rendezvous                   // waits for other ranks' steps of the kind, not for transfers (IsRendezvous)
	rebuild                      // re-runs the stage's Forward to rebuild what its F dropped (IsRebuild)
	collective                   // a rendezvous of every rank, the n-th of each meeting the n-th of every other (IsCollective)
)

// kinds is the kind table: one row per kind. The letters are those of the
// committed generated tables; changing one changes generated code and needs
// a new Version.
var kinds = [numKinds]row{
	Invalid:           {name: "INVALID", goName: "Invalid"},
	Forward:           {"F", "Forward", "F", 'F', ArgsCompute, NoChannel, compute, []string{"FWD", "FORWARD"}},
	Backward:          {"B", "Backward", "B", 'B', ArgsCompute, NoChannel, compute | backward, []string{"BWD", "FULL_BACKWARD"}},
	BackwardInput:     {"I", "BackwardInput", "I", 'I', ArgsCompute, NoChannel, compute | backward, []string{"BWD_INPUT", "BACKWARD_INPUT"}},
	BackwardWeight:    {"W", "BackwardWeight", "W", 'W', ArgsLocal, NoChannel, compute, []string{"BWD_WEIGHT", "BACKWARD_WEIGHT"}},
	SendF:             {"SEND_F", "SendF", "SendF", 's', ArgsComm, ActChannel, send, []string{"FWD_SEND"}},
	RecvF:             {"RECV_F", "RecvF", "RecvF", 'r', ArgsComm, ActChannel, recv, []string{"FWD_RECV"}},
	SendB:             {"SEND_B", "SendB", "SendB", 'S', ArgsComm, GradChannel, send, []string{"BWD_SEND"}},
	RecvB:             {"RECV_B", "RecvB", "RecvB", 'R', ArgsComm, GradChannel, recv, []string{"BWD_RECV"}},
	DataLoad:          {"DATA_LOAD", "DataLoad", "DataLoad", 'L', ArgsLocal, NoChannel, 0, nil},
	DataSend:          {"DATA_SEND", "DataSend", "DataSend", 't', ArgsComm, DataChannel, send, nil},
	DataRecv:          {"DATA_RECV", "DataRecv", "DataRecv", 'T', ArgsComm, DataChannel, recv, nil},
	Unshard:           {"UNSHARD", "Unshard", "Unshard", 'U', ArgsStage, NoChannel, fsdp, nil},
	Reshard:           {"RESHARD", "Reshard", "Reshard", 'u', ArgsStage, NoChannel, fsdp, nil},
	ReduceGrad:        {"REDUCE_GRAD", "ReduceGrad", "ReduceGrad", 'G', ArgsStage, NoChannel, fsdp, nil},
	SwapLaunchOffload: {"SWAP_LAUNCH_OFFLOAD", "SwapLaunchOffload", "SwapLaunchOffload", 'J', ArgsLocal, NoChannel, swap, nil},
	SwapWaitOffload:   {"SWAP_WAIT_OFFLOAD", "SwapWaitOffload", "SwapWaitOffload", 'j', ArgsLocal, NoChannel, swap, nil},
	SwapLaunchLoad:    {"SWAP_LAUNCH_LOAD", "SwapLaunchLoad", "SwapLaunchLoad", 'K', ArgsLocal, NoChannel, swap, nil},
	SwapWaitLoad:      {"SWAP_WAIT_LOAD", "SwapWaitLoad", "SwapWaitLoad", 'k', ArgsLocal, NoChannel, swap, nil},
	OverlapFB:         {"OVERLAP_F_B", "OverlapFB", "OverlapFB", 'X', ArgsOverlap, NoChannel, compute, nil},
	OverlapBF:         {"OVERLAP_B_F", "OverlapBF", "OverlapBF", 'Y', ArgsOverlap, NoChannel, compute, nil},
	OptStep:           {"OPT_STEP", "OptStep", "OptStep", 'O', ArgsNone, NoChannel, 0, nil},
	MpipeSend:         {"MPIPE_FWD_SEND", "MpipeSend", "MpipeSend", 'm', ArgsComm, DataChannel, send, nil},
	MpipeRecv:         {"MPIPE_FWD_RECV", "MpipeRecv", "MpipeRecv", 'M', ArgsComm, DataChannel, recv, nil},
	BatchBegin:        {"BATCH_BEGIN", "BatchBegin", "BatchBegin", 'Q', ArgsNone, NoChannel, 0, nil},
	BatchEnd:          {"BATCH_END", "BatchEnd", "BatchEnd", 'q', ArgsNone, NoChannel, 0, nil},
	TieGrad:           {"TIE_GRAD", "TieGrad", "TieGrad", 'E', ArgsStage, NoChannel, rendezvous, nil},
	AllReduce:         {"ALL_REDUCE", "AllReduce", "AllReduce", 'A', ArgsNone, NoChannel, rendezvous | collective, nil},
	Recompute:         {"RECOMPUTE", "Recompute", "Recompute", 'C', ArgsLocal, NoChannel, rebuild, []string{"R"}},
	GatherLoss:        {"GATHER_LOSS", "GatherLoss", "GatherLoss", 'l', ArgsNone, NoChannel, rendezvous | collective, nil},
}

// facts is the part of a row the predicates read, packed in six bytes.
type facts struct {
	code    byte
	shape   Shape
	channel Channel
	class   class
}

// fact holds every Kind value's facts, indexed by the value itself so that
// a predicate is one load, without a branch or a bounds check (the
// compiler, verify and sim ask them of every step); values out of range
// have no letter, ArgsNone, NoChannel and no class but the stage and micro
// flags (HasStage and HasMicro hold for them, as for Invalid). byName and
// byCode invert the table: every name and alias, every letter.
var fact, byName, byCode = func() ([256]facts, map[string]Kind, [256]Kind) {
	var t [256]facts
	names := make(map[string]Kind, 3*numKinds)
	var codes [256]Kind
	for k := range t {
		// Invalid and values out of range count as naming a stage and a
		// micro-batch (HasStage, HasMicro).
		t[k].class = stage | micro
	}
	for k := Invalid; k < numKinds; k++ {
		r := &kinds[k]
		cl := r.class
		if k != Invalid {
			if s := r.shape; s != ArgsNone && s != ArgsOverlap {
				cl |= stage
			}
			if s := r.shape; s == ArgsLocal || s == ArgsComm || s == ArgsCompute {
				cl |= micro
			}
		} else {
			cl |= stage | micro
		}
		t[k] = facts{r.code, r.shape, r.channel, cl}
		if k == Invalid {
			continue
		}
		names[r.name] = k
		for _, a := range r.aliases {
			names[a] = k
		}
		codes[r.code] = k
	}
	return t, names, codes
}()

// Kinds returns every valid kind in declaration order.
func Kinds() []Kind {
	ks := make([]Kind, 0, numKinds-1)
	for k := Forward; k < numKinds; k++ {
		ks = append(ks, k)
	}
	return ks
}

// Valid reports whether k is one of the step kinds (not Invalid, not out of range).
func (k Kind) Valid() bool { return k > Invalid && k < numKinds }

// String returns the kind's name in schedule text ("F", "SEND_F", ...),
// "INVALID" for Invalid and "Kind(n)" for a value out of range.
func (k Kind) String() string {
	if k < numKinds {
		return kinds[k].name
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ParseKind parses a kind name, accepting the aliases of hyper-parallel
// ("FWD", "BWD_SEND", ...) and PyTorch's long names ("FULL_BACKWARD", ...).
// "INVALID" is not a kind.
func ParseKind(s string) (Kind, bool) {
	k, ok := byName[s]
	return k, ok
}

// GoName returns the Go identifier of the kind's constant ("DataRecv"):
// abi's, gen/ir's alias and, after "Op", runtime/pipe's OpKind constant
// ("OpDataRecv"). It is "" for kinds out of range.
func (k Kind) GoName() string {
	if k < numKinds {
		return kinds[k].goName
	}
	return ""
}

// Method returns the name of the pipe.Exec method generated code calls for
// a step of kind k ("F", "RecvLabels", "OptStep", ...), "" for Invalid and
// kinds out of range. Its arguments follow the kind's Shape: one pipe.At
// when the shape is Packed, the stage for ArgsStage, none for ArgsNone, the
// two sub-steps' operands for ArgsOverlap.
func (k Kind) Method() string {
	if k < numKinds {
		return kinds[k].method
	}
	return ""
}

// Aliases returns the other spellings ParseKind accepts for k.
func (k Kind) Aliases() []string {
	if k < numKinds {
		return append([]string(nil), kinds[k].aliases...)
	}
	return nil
}

// Code returns the kind's letter in a pipe.DecodeOps kinds string ("F", "s"
// for SEND_F, ...), or 0 for Invalid and kinds out of range.
func (k Kind) Code() byte { return fact[k].code }

// KindOfCode returns the kind whose Code is c, or Invalid.
func KindOfCode(c byte) Kind { return byCode[c] }

// Shape returns the operands a step of kind k carries (ArgsNone for Invalid).
func (k Kind) Shape() Shape { return fact[k].shape }

// Channel returns the channel of a transfer kind, or NoChannel.
func (k Kind) Channel() Channel { return fact[k].channel }

// IsCompute reports whether the kind runs model compute (F, B, I, W or an overlap of two).
func (k Kind) IsCompute() bool { return fact[k].class&compute != 0 }

// IsBackward reports whether the kind produces the input gradient of a stage (B or I).
func (k Kind) IsBackward() bool { return fact[k].class&backward != 0 }

// IsFSDP reports whether the kind is an FSDP step (UNSHARD, RESHARD, REDUCE_GRAD).
func (k Kind) IsFSDP() bool { return fact[k].class&fsdp != 0 }

// IsSwap reports whether the kind is an activation swap step (SWAP_LAUNCH_OFFLOAD,
// SWAP_WAIT_OFFLOAD, SWAP_LAUNCH_LOAD, SWAP_WAIT_LOAD).
func (k Kind) IsSwap() bool { return fact[k].class&swap != 0 }

// IsBatch reports whether the kind brackets a batch of transfers
// (BATCH_BEGIN, BATCH_END): the transfers between a BATCH_BEGIN and the next
// BATCH_END of a rank are posted together and complete as a unit
// (docs/design.md §5, pass 9).
func (k Kind) IsBatch() bool { return k == BatchBegin || k == BatchEnd }

// IsTie reports whether the kind is TIE_GRAD, the exchange of a tied
// parameter's gradients between the two stages of a tie (-tie A:B).
func (k Kind) IsTie() bool { return k == TieGrad }

// IsCollective reports whether the kind is a collective, a rendezvous
// every rank of the world takes part in (ALL_REDUCE): each rank's n-th step
// of the kind in an iteration meets every other rank's n-th. gen/verify
// and gen/sim check and time every such kind alike (their collective.go);
// a kind of the class declares itself there in one line of its own file.
func (k Kind) IsCollective() bool { return fact[k].class&collective != 0 }

// IsRendezvous reports whether a step of the kind is a rendezvous: it
// waits for steps of the same kind on other ranks (and for its rank's
// transfers to drain) rather than for one transfer: TIE_GRAD, ALL_REDUCE.
// gen/sim times it as one (a meet), and gen/verify's rule for the kind
// adds its waits to the strict model.
func (k Kind) IsRendezvous() bool { return fact[k].class&rendezvous != 0 }

// IsRebuild reports whether a step of the kind re-runs its stage's Forward
// on a chunk whose F kept only the stage's input, to rebuild what the
// stage saved before the chunk's backward (RECOMPUTE). What that means
// elsewhere is read from this class, not from the kind: the F of a stage
// with such steps keeps only the input (the emitted pipe.Spec lists those
// stages in the field named after the kind's Go name, Spec.Recompute); the
// chunk is not live from its F to the step (gen/sim's memory, gen/verify's
// rule); the step is model compute in gen/sim's busy time; and a
// pipe.Timeline counts it as a call of the stage's Forward.
func (k Kind) IsRebuild() bool { return fact[k].class&rebuild != 0 }

// IsOverlap reports whether the kind is a composite of two compute sub-steps.
func (k Kind) IsOverlap() bool { return k.Shape() == ArgsOverlap }

// IsComm reports whether the kind is a point-to-point transfer (activations,
// gradients or data) that pairs with a step on a peer rank.
func (k Kind) IsComm() bool { return k.Channel() != NoChannel }

// IsSend reports whether the kind is the sending half of a transfer.
func (k Kind) IsSend() bool { return fact[k].class&send != 0 }

// IsRecv reports whether the kind is the receiving half of a transfer.
func (k Kind) IsRecv() bool { return fact[k].class&recv != 0 }

// HasStage reports whether steps of this kind name a stage: all but
// OPT_STEP, ALL_REDUCE and the overlaps (whose sub-steps do). Invalid and kinds out of
// range count as naming one, so that their text shows what was given.
func (k Kind) HasStage() bool { return fact[k].class&stage != 0 }

// HasMicro reports whether steps of this kind name a micro-batch: all but
// OPT_STEP, ALL_REDUCE, the overlaps, the FSDP steps (UNSHARD, RESHARD, REDUCE_GRAD) and
// TIE_GRAD.
// Invalid and kinds out of range count as naming one.
func (k Kind) HasMicro() bool { return fact[k].class&micro != 0 }

// Channel names the FIFO a transfer travels on: sends and receives match in
// order per (source rank, destination rank, channel).
type Channel uint8

// The channels of point-to-point transfers.
const (
	NoChannel   Channel = iota
	ActChannel          // activations: SEND_F / RECV_F
	GradChannel         // gradients: SEND_B / RECV_B
	DataChannel         // labels and masks: DATA_SEND / DATA_RECV; owned inputs: MPIPE_FWD_SEND / MPIPE_FWD_RECV
)

// String names the channel: "act", "grad", "data" or "none".
func (c Channel) String() string {
	switch c {
	case ActChannel:
		return "act"
	case GradChannel:
		return "grad"
	case DataChannel:
		return "data"
	}
	return "none"
}
