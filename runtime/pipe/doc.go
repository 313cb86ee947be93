// Package pipe is the executor that ppgen's generated code calls.
//
// The compiler (gen/) emits one straight-line function per rank,
//
//	func Rank1(x *pipe.Exec) error { x.RecvF(0x0001_0000_0000_0000); x.F(0x0001_0000_0000_ffff); ...; return x.Err() }
//
// and an [Exec] runs those calls for one rank: it holds the rank's [Stage]s,
// the buffer slots, the [Loss], the [DataSource] and a transport.Transport.
// docs/internals.md is the contract; this comment summarizes how the runtime
// honours it.
//
// # Steps
//
// Every step is a method with constant arguments and no results. The steps
// of one chunk take one [At], the step's four arguments packed into one word
// (it compiles about twice as fast as four): DataLoad, RecvF, SendF, RecvB,
// SendB, F, B, I, W, the swap steps (SwapLaunchOffload, ...), the labels
// (DataRecv, DataSend) and mpipe's owned inputs (MpipeRecv, MpipeSend),
// each named after its kind, or by its text name for F, B, I and W
// (abi.Kind.Method); the fused
// pairs (FAndSend, RecvAndF, ...) run two of them in one call. OptStep and
// AllReduce (which call Config's hooks) take none; the FSDP steps (Unshard,
// Reshard, ReduceGrad, by stage), TieGrad and the overlap steps OverlapFB
// and OverlapBF take their arguments as ints. [OpKind] and [At] are
// the boundary package abi's Kind and At, which gen/ uses too, so the
// compiler and the runtime share one list of kinds, one letter per kind in
// -table programs ([DecodeOps]) and one At layout. The overlap steps run
// a forward and a backward of two micro-batches together: on two goroutines
// when their stages are different objects, one after the other otherwise (or
// with Config.SerialOverlap), with bit-identical results. Errors are sticky:
// the first one is kept ([Exec.Err]) and every later method returns at once.
// Errors are *[StepError]s naming the rank, the step in schedule text form
// ("3F5", "1RECV_B2") and the peer.
//
// Each step method has a fast path, which tests every check at once, and a
// slow path, which runs them one by one to name the first that fails; both
// end in the same body (compute.go, transfer.go), and FuzzExecPaths checks
// that they agree on random programs. The code is split by concern:
// config.go (Config, New, lifecycle, errors), slots.go (slots and argument
// checks), compute.go, transfer.go (one implementation behind every send
// and receive), fused.go, overlap.go, swap.go, fsdp.go, labels.go, mpipe.go,
// copies.go, tie.go, allreduce.go, batch.go, interpret.go, multi.go and multistage.go (sets of tensors,
// below), values.go (stages on other array libraries, below) and
// fingerprints.go.
//
// # Several programs in one world
//
// A trainer may run several generated programs over one world, such as a
// train program and the forward-only eval program generated beside it with
// `ppgen gen -name Eval` (EvalSpec, EvalRanks). It opens the world with
// [Fingerprints] of all of them as the fingerprint its ranks check at the
// one rendezvous, and hands the same transport to an Exec of each program:
// [New] accepts a transport whose checked fingerprint is Spec.Fingerprint or
// a combination holding it.
//
// # Slots
//
// A rank has Spec.Slots[rank] slots, a fixed array. A slot holds one chunk
// (stage, micro): its input x, saved context, output y, output gradient dy,
// input gradient dx, labels. A chunk's first step (DATA_LOAD, RECV_F or F)
// claims the slot; every later step of the chunk must name the same slot,
// and the runtime checks that it does. F with src >= 0 takes x = y of slot
// src (the previous stage on this rank); B and I with src >= 0 take dy = dx
// of slot src (the next stage on this rank). F on the last stage computes
// the loss from y and the labels and keeps dy in the slot.
//
// # The comm stream
//
// Transfers are posted, not executed: they go to the rank's comm goroutine,
// which runs them one at a time in program order, as the strict execution
// model's comm stream does. The host thread (the one calling the methods)
// never blocks on a post. A compute step that consumes a receive (F for
// RECV_F, B or I for RECV_B) waits for that slot's receive to complete. A
// send captures the tensor at post time and the transport copies or writes
// it before the comm goroutine moves on, so reusing the slot later cannot
// corrupt it; Stages must not mutate a tensor after returning it. Receives
// are matched FIFO per (peer, channel) by the transport, and each message's
// tag (sender stage and micro) is checked. [Exec.Sync] waits for every
// posted comm op; [Run] calls it.
//
// # Several tensors per boundary
//
// A slot holds one tensor per input, output and gradient; a stage that
// takes and returns a set (hidden states with a mask, positions) is a
// [MultiStage] that [Multi] adapts: the set crosses each boundary as one
// carrier tensor ([Pack], [Unpack]), so one message per transfer on every
// transport, with shapes that may change per micro-batch, and the
// generated code and the steps are those of single tensors. A part without
// a gradient gets nil. [MultiLossOf] adapts the loss and [MultiBatches]
// packs the inputs. Unpack checks a carrier from a peer before it sizes
// anything (a *[MultiError] names the bad field). docs/internals.md,
// "Several tensors per boundary", has the layout and the rules.
//
// # Other array libraries
//
// The slots, the transports and the steps hold gorgonia tensors. A model
// on another Go array library is a [ValueStage], on package value's Values
// (a dtype, a shape, the native-order bytes), and [FromValues] adapts it to
// a Stage at the boundary: the input and gradient tensors become values of
// the library's value.Maker (views of their memory where it can view
// them), the stage's values become tensors (over their bytes where they
// are aligned). [FromValuesLoss] and [FromValuesData] adapt the loss and
// the data; Swapper, Sharded and, as [ValueCopyGrads] and [ValueTied], the
// gradient interfaces pass through. This is an adapter layer, not a second
// runtime: the Stage, Loss, DataSource and transport interfaces are
// unchanged. runtime/value/gonumvalue is gonum's; docs/internals.md,
// "Values", has the contract.
//
// # Failure
//
// When a rank fails (a Stage error, a transport error, a misuse of the API,
// a panic inside [Run]), it aborts its transport: every peer's pending and
// future comm fails with an error naming the failed rank, so no rank hangs.
// Every wait is bounded by the transport's timeout.
//
// # Versioning
//
// Generated code contains
//
//	const _ = pipe.SupportPackageIsVersion2
//
// which breaks its build when this package no longer supports the API it was
// generated against. When the API changes incompatibly, this package adds
// SupportPackageIsVersion3 (and the emitter starts referring to it) and, once
// the old API is dropped, removes SupportPackageIsVersion2, so stale
// generated code fails to compile with an undefined-name error that points at
// the guard instead of failing at run time.
//
// # Interpreter
//
// [Interpret] runs a program given as data ([]Op) through the same methods;
// generated files carry such tables with -table. An op whose fields no At
// can hold (below -1 or above 65534) is reported with the slow paths'
// messages.
package pipe

// SupportPackageIsVersion2 is referenced by generated code to assert that it
// is compatible with this version of the runtime API. See "Versioning" above.
// Version 2 named the step methods after their kinds (x.DataLoad,
// x.DataSend, x.DataRecv, x.SwapLaunchOffload, ..., x.MpipeSend,
// x.MpipeRecv; Version 1 had x.Load, x.SendLabels, x.LaunchOffload,
// x.SendInput, ...), so SupportPackageIsVersion1 is gone.
const SupportPackageIsVersion2 = true
