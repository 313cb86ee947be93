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

// The OpKind constants (OpForward, OpSendF, ..., "Op" and the kind's Go
// name) and the interpreter's tables of Exec methods are generated from
// abi's kind table, each kind's row naming its method (kinds_gen.go).
//
//go:generate go run ./internal/gendispatch -o kinds_gen.go

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
