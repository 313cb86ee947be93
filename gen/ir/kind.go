package ir

import "fmt"

// Kind is the kind of one step of a rank's program (docs/design.md §3).
type Kind uint8

// The step kinds. Their String form is the one used in schedule text.
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
	numKinds
)

var kindNames = [numKinds]string{
	Invalid:           "INVALID",
	Forward:           "F",
	Backward:          "B",
	BackwardInput:     "I",
	BackwardWeight:    "W",
	SendF:             "SEND_F",
	RecvF:             "RECV_F",
	SendB:             "SEND_B",
	RecvB:             "RECV_B",
	DataLoad:          "DATA_LOAD",
	DataSend:          "DATA_SEND",
	DataRecv:          "DATA_RECV",
	Unshard:           "UNSHARD",
	Reshard:           "RESHARD",
	ReduceGrad:        "REDUCE_GRAD",
	SwapLaunchOffload: "SWAP_LAUNCH_OFFLOAD",
	SwapWaitOffload:   "SWAP_WAIT_OFFLOAD",
	SwapLaunchLoad:    "SWAP_LAUNCH_LOAD",
	SwapWaitLoad:      "SWAP_WAIT_LOAD",
	OverlapFB:         "OVERLAP_F_B",
	OverlapBF:         "OVERLAP_B_F",
	OptStep:           "OPT_STEP",
	MpipeSend:         "MPIPE_FWD_SEND",
	MpipeRecv:         "MPIPE_FWD_RECV",
}

// aliases are the other spellings the parser accepts: hyper-parallel's names
// and PyTorch's long names.
var aliases = map[string]Kind{
	"FWD":             Forward,
	"BWD":             Backward,
	"BWD_INPUT":       BackwardInput,
	"BWD_WEIGHT":      BackwardWeight,
	"FWD_SEND":        SendF,
	"FWD_RECV":        RecvF,
	"BWD_SEND":        SendB,
	"BWD_RECV":        RecvB,
	"FORWARD":         Forward,
	"FULL_BACKWARD":   Backward,
	"BACKWARD_INPUT":  BackwardInput,
	"BACKWARD_WEIGHT": BackwardWeight,
}

// Kinds returns every valid kind in declaration order.
func Kinds() []Kind {
	ks := make([]Kind, 0, numKinds-1)
	for k := Forward; k < numKinds; k++ {
		ks = append(ks, k)
	}
	return ks
}

// String returns the kind's name in schedule text ("F", "SEND_F", ...).
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ParseKind parses a kind name, accepting the aliases of hyper-parallel and PyTorch.
func ParseKind(s string) (Kind, bool) {
	for k := Forward; k < numKinds; k++ {
		if kindNames[k] == s {
			return k, true
		}
	}
	k, ok := aliases[s]
	return k, ok
}

// IsCompute reports whether the kind runs model compute (F, B, I, W or an overlap of two).
func (k Kind) IsCompute() bool {
	switch k {
	case Forward, Backward, BackwardInput, BackwardWeight, OverlapFB, OverlapBF:
		return true
	}
	return false
}

// IsBackward reports whether the kind produces the input gradient of a stage (B or I).
func (k Kind) IsBackward() bool { return k == Backward || k == BackwardInput }

// IsOverlap reports whether the kind is a composite of two compute sub-steps.
func (k Kind) IsOverlap() bool { return k == OverlapFB || k == OverlapBF }

// IsComm reports whether the kind is a point-to-point transfer (activations,
// gradients or data) that pairs with a step on a peer rank.
func (k Kind) IsComm() bool {
	switch k {
	case SendF, RecvF, SendB, RecvB, DataSend, DataRecv, MpipeSend, MpipeRecv:
		return true
	}
	return false
}

// IsSend reports whether the kind is the sending half of a transfer.
func (k Kind) IsSend() bool { return k == SendF || k == SendB || k == DataSend || k == MpipeSend }

// IsRecv reports whether the kind is the receiving half of a transfer.
func (k Kind) IsRecv() bool { return k == RecvF || k == RecvB || k == DataRecv || k == MpipeRecv }

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

// String names the channel.
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

// Channel returns the channel of a comm kind, or NoChannel.
func (k Kind) Channel() Channel {
	switch k {
	case SendF, RecvF:
		return ActChannel
	case SendB, RecvB:
		return GradChannel
	case DataSend, DataRecv, MpipeSend, MpipeRecv:
		return DataChannel
	}
	return NoChannel
}

// HasMicro reports whether steps of this kind name a micro-batch.
func (k Kind) HasMicro() bool {
	switch k {
	case Unshard, Reshard, ReduceGrad, OptStep, OverlapFB, OverlapBF:
		return false
	}
	return true
}

// HasStage reports whether steps of this kind name a stage.
func (k Kind) HasStage() bool { return k != OptStep && !k.IsOverlap() }

// Valid reports whether k is one of the step kinds (not Invalid, not out of range).
func (k Kind) Valid() bool { return k > Invalid && k < numKinds }
