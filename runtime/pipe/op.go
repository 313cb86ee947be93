package pipe

import (
	"errors"
	"fmt"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/transport"
)

// OpKind is the kind of one step of a rank's program given as data: the
// boundary package's abi.Kind (gen/ir calls it Kind), so the generator and
// the runtime share one enum, its text form (String: "F", "SEND_B", ...) and
// its table letters (Code).
type OpKind = abi.Kind

// The step kinds, one per Exec method, under the runtime's names; each
// comment names the method and the Op fields it reads. The zero value is
// invalid.
const (
	OpInvalid        = abi.Invalid
	OpDataLoad       = abi.DataLoad       // Load: Stage, Micro, Slot
	OpRecvAct        = abi.RecvF          // RecvF: Stage, Micro, Peer, Slot
	OpSendAct        = abi.SendF          // SendF: Stage, Micro, Peer, Slot
	OpRecvGrad       = abi.RecvB          // RecvB: Stage, Micro, Peer, Slot
	OpSendGrad       = abi.SendB          // SendB: Stage, Micro, Peer, Slot
	OpForward        = abi.Forward        // F: Stage, Micro, Slot, Src
	OpBackward       = abi.Backward       // B: Stage, Micro, Slot, Src
	OpBackwardInput  = abi.BackwardInput  // I: Stage, Micro, Slot, Src
	OpBackwardWeight = abi.BackwardWeight // W: Stage, Micro, Slot
	OpOptStep        = abi.OptStep        // OptStep: no fields
	// An overlap is three consecutive ops: this header (other fields -1)
	// and its two sub-steps in order, F then B, I or W for OpOverlapFB, the
	// reverse for OpOverlapBF; see Exec.OverlapFB and Exec.OverlapBF.
	OpOverlapFB  = abi.OverlapFB  // OverlapFB(F sub-step, backward sub-step)
	OpOverlapBF  = abi.OverlapBF  // OverlapBF(backward sub-step, F sub-step)
	OpUnshard    = abi.Unshard    // Unshard: Stage
	OpReshard    = abi.Reshard    // Reshard: Stage
	OpReduceGrad = abi.ReduceGrad // ReduceGrad: Stage
	// The swap steps of a chunk (Stage, Micro, Slot): LaunchOffload,
	// WaitOffload, LaunchLoad, WaitLoad.
	OpSwapLaunchOffload = abi.SwapLaunchOffload
	OpSwapWaitOffload   = abi.SwapWaitOffload
	OpSwapLaunchLoad    = abi.SwapLaunchLoad
	OpSwapWaitLoad      = abi.SwapWaitLoad
	// mpipe's owned-micro loading: RecvInput (Stage, Micro, Peer, Slot) on
	// the first stage's rank, SendInput (Stage, Micro, Peer) on the owner.
	OpRecvInput = abi.MpipeRecv
	OpSendInput = abi.MpipeSend
	// Labels along the pipe (Spec.ShipLabels): RecvLabels and SendLabels
	// (Stage, Micro, Peer, Slot), ahead of the chunk's activation transfer.
	OpRecvData = abi.DataRecv
	OpSendData = abi.DataSend
	// A batch of transfers: BatchBegin, the transfers, BatchEnd (no
	// fields); the transfers between are issued as one group.
	OpBatchBegin = abi.BatchBegin
	OpBatchEnd   = abi.BatchEnd
	// TieGrad (Stage): sum a tie's gradients (Spec.Ties, Tied).
	OpTieGrad = abi.TieGrad
)

// Op is one step as data. Unused fields are -1 (Peer of local steps, Src of
// steps without a local source) or 0.
type Op struct {
	Kind                          OpKind
	Stage, Micro, Peer, Slot, Src int32
}

// String returns the step in schedule text form, e.g. "2SEND_F3".
func (o Op) String() string { return stepName(o.Kind, int(o.Stage), int(o.Micro)) }

func stepName(k OpKind, stage, micro int) string {
	switch {
	case !k.HasStage():
		return k.String()
	case !k.HasMicro():
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
