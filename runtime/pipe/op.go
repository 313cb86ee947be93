package pipe

import (
	"errors"
	"fmt"

	"github.com/ppgen/ppgen/runtime/transport"
)

// OpKind is the kind of one step of a rank's program given as data.
type OpKind uint8

// The step kinds, one per Exec method. The zero value is invalid.
const (
	OpInvalid        OpKind = iota
	OpDataLoad              // DataLoad(Stage, Micro, Slot)
	OpRecvAct               // RecvAct(Stage, Micro, Peer, Slot)
	OpSendAct               // SendAct(Stage, Micro, Peer, Slot)
	OpRecvGrad              // RecvGrad(Stage, Micro, Peer, Slot)
	OpSendGrad              // SendGrad(Stage, Micro, Peer, Slot)
	OpForward               // Forward(Stage, Micro, Slot, Src)
	OpBackward              // Backward(Stage, Micro, Slot, Src)
	OpBackwardInput         // BackwardInput(Stage, Micro, Slot, Src)
	OpBackwardWeight        // BackwardWeight(Stage, Micro, Slot)
	OpOptStep               // OptStep()
	// An overlap is three consecutive ops: this header (other fields -1)
	// and its two sub-steps in order, F then B, I or W for OpOverlapFB, the
	// reverse for OpOverlapBF; see Exec.OverlapFB and Exec.OverlapBF.
	OpOverlapFB  // OverlapFB(F sub-step, backward sub-step)
	OpOverlapBF  // OverlapBF(backward sub-step, F sub-step)
	OpUnshard    // Unshard(Stage)
	OpReshard    // Reshard(Stage)
	OpReduceGrad // ReduceGrad(Stage)
	// The swap steps of a chunk: SwapLaunchOffload(Stage, Micro, Slot), ...
	OpSwapLaunchOffload
	OpSwapWaitOffload
	OpSwapLaunchLoad
	OpSwapWaitLoad
	// mpipe's owned-micro loading: RecvInput(Stage, Micro, Peer, Slot) on the
	// first stage's rank, SendInput(Stage, Micro, Peer) on the owner.
	OpRecvInput
	OpSendInput
	// Labels along the pipe (Spec.ShipLabels): RecvData and SendData
	// (Stage, Micro, Peer, Slot), ahead of the chunk's activation transfer.
	OpRecvData
	OpSendData
	numOpKinds
)

// kindText is the schedule text form of each kind (docs/internals.md).
var kindText = [numOpKinds]string{
	OpInvalid:           "INVALID",
	OpDataLoad:          "DATA_LOAD",
	OpRecvAct:           "RECV_F",
	OpSendAct:           "SEND_F",
	OpRecvGrad:          "RECV_B",
	OpSendGrad:          "SEND_B",
	OpForward:           "F",
	OpBackward:          "B",
	OpBackwardInput:     "I",
	OpBackwardWeight:    "W",
	OpOptStep:           "OPT_STEP",
	OpOverlapFB:         "OVERLAP_F_B",
	OpOverlapBF:         "OVERLAP_B_F",
	OpUnshard:           "UNSHARD",
	OpReshard:           "RESHARD",
	OpReduceGrad:        "REDUCE_GRAD",
	OpSwapLaunchOffload: "SWAP_LAUNCH_OFFLOAD",
	OpSwapWaitOffload:   "SWAP_WAIT_OFFLOAD",
	OpSwapLaunchLoad:    "SWAP_LAUNCH_LOAD",
	OpSwapWaitLoad:      "SWAP_WAIT_LOAD",
	OpRecvInput:         "MPIPE_FWD_RECV",
	OpSendInput:         "MPIPE_FWD_SEND",
	OpRecvData:          "DATA_RECV",
	OpSendData:          "DATA_SEND",
}

// String returns the kind's schedule text name ("F", "SEND_B", ...).
func (k OpKind) String() string {
	if k < numOpKinds {
		return kindText[k]
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one step as data. Unused fields are -1 (Peer of local steps, Src of
// steps without a local source) or 0.
type Op struct {
	Kind                          OpKind
	Stage, Micro, Peer, Slot, Src int32
}

// String returns the step in schedule text form, e.g. "2SEND_F3".
func (o Op) String() string { return stepName(o.Kind, int(o.Stage), int(o.Micro)) }

func stepName(k OpKind, stage, micro int) string {
	switch k {
	case OpOptStep, OpOverlapFB, OpOverlapBF:
		return k.String()
	case OpUnshard, OpReshard, OpReduceGrad:
		return fmt.Sprintf("%d%s", stage, k)
	}
	return fmt.Sprintf("%d%s%d", stage, k, micro)
}

// StepError is the error of a failed step. Its message names the rank, the
// step in schedule text form and, for transfers, the peer rank.
type StepError struct {
	Rank int
	Step string // e.g. "3F5", "1RECV_B2", "OPT_STEP"; "" outside a step
	Peer int    // peer rank of a transfer, -1 otherwise
	Err  error
}

func (e *StepError) Error() string {
	switch {
	case e.Step == "":
		return fmt.Sprintf("pipe: rank %d: %v", e.Rank, e.Err)
	case e.Peer >= 0:
		// A transfer that waited the transport's timeout: name the step,
		// the peer and the timeout, not the transport's layers.
		var pe *transport.ProgressError
		if errors.As(e.Err, &pe) && pe.Peer == e.Peer {
			dir := "from"
			if pe.Op == "send" {
				dir = "to"
			}
			return fmt.Sprintf("pipe: rank %d: step %s %s rank %d: %s", e.Rank, e.Step, dir, e.Peer, pe.Detail())
		}
		return fmt.Sprintf("pipe: rank %d step %s (peer rank %d): %v", e.Rank, e.Step, e.Peer, e.Err)
	default:
		return fmt.Sprintf("pipe: rank %d step %s: %v", e.Rank, e.Step, e.Err)
	}
}

// Unwrap returns the underlying error.
func (e *StepError) Unwrap() error { return e.Err }

// ErrClosed is returned by steps posted after Exec.Close.
var ErrClosed = errors.New("exec is closed")
