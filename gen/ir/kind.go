package ir

import "github.com/ppgen/ppgen/abi"

// Kind is the kind of one step of a rank's program (docs/design.md §3): the
// boundary package's abi.Kind, which runtime/pipe calls OpKind. Its String
// form is the one used in schedule text; its methods (IsCompute, IsComm,
// Channel, HasMicro, ...) are abi's.
type Kind = abi.Kind

// The step kinds that gen/ calls often, abi's under the same names (see
// abi for each one's text form, shape and runtime method; TestKindAliasesAreAbis
// checks the names): a shorthand, not a spelling of their own. A new kind
// needs no line here; code names it abi.X.
const (
	Invalid           = abi.Invalid
	Forward           = abi.Forward           // F
	Backward          = abi.Backward          // B
	BackwardInput     = abi.BackwardInput     // I
	BackwardWeight    = abi.BackwardWeight    // W
	SendF             = abi.SendF             // SEND_F
	RecvF             = abi.RecvF             // RECV_F
	SendB             = abi.SendB             // SEND_B
	RecvB             = abi.RecvB             // RECV_B
	DataLoad          = abi.DataLoad          // DATA_LOAD
	DataSend          = abi.DataSend          // DATA_SEND
	DataRecv          = abi.DataRecv          // DATA_RECV
	Unshard           = abi.Unshard           // UNSHARD
	Reshard           = abi.Reshard           // RESHARD
	ReduceGrad        = abi.ReduceGrad        // REDUCE_GRAD
	SwapLaunchOffload = abi.SwapLaunchOffload // SWAP_LAUNCH_OFFLOAD
	SwapWaitOffload   = abi.SwapWaitOffload   // SWAP_WAIT_OFFLOAD
	SwapLaunchLoad    = abi.SwapLaunchLoad    // SWAP_LAUNCH_LOAD
	SwapWaitLoad      = abi.SwapWaitLoad      // SWAP_WAIT_LOAD
	OverlapFB         = abi.OverlapFB         // OVERLAP_F_B
	OverlapBF         = abi.OverlapBF         // OVERLAP_B_F
	OptStep           = abi.OptStep           // OPT_STEP
	MpipeSend         = abi.MpipeSend         // MPIPE_FWD_SEND
	MpipeRecv         = abi.MpipeRecv         // MPIPE_FWD_RECV
	BatchBegin        = abi.BatchBegin        // BATCH_BEGIN
	BatchEnd          = abi.BatchEnd          // BATCH_END
	TieGrad           = abi.TieGrad           // TIE_GRAD
)

// Kinds returns every valid kind in declaration order.
func Kinds() []Kind { return abi.Kinds() }

// ParseKind parses a kind name, accepting the aliases of hyper-parallel and PyTorch.
func ParseKind(s string) (Kind, bool) { return abi.ParseKind(s) }

// Channel names the FIFO a transfer travels on: sends and receives match in
// order per (source rank, destination rank, channel). It is abi.Channel
// (whose constants name the channels).
type Channel = abi.Channel
