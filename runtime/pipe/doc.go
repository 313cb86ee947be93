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
// Every step is a method with constant arguments and no results: DataLoad,
// RecvAct, SendAct, RecvGrad, SendGrad, Forward, Backward, BackwardInput,
// BackwardWeight, OptStep, and the overlap steps OverlapFB and OverlapBF.
// Generated code calls the first nine in their packed form, Load, RecvF,
// SendF, RecvB, SendB, F, B, I and W, whose one argument is an [At] holding
// all four (it compiles about twice as fast). [OpKind] and [At] are the
// boundary package abi's Kind and At, which gen/ uses too, so the compiler
// and the runtime share one list of kinds, one letter per kind in -table
// programs ([DecodeOps]) and one At layout. The overlap steps run a
// forward and a backward of two micro-batches together: on two goroutines
// when their stages are different objects, one after the other otherwise (or
// with Config.SerialOverlap), with bit-identical results. Errors are sticky:
// the first one is kept ([Exec.Err])
// and every later method returns at once. Errors are *[StepError]s naming the
// rank, the step in schedule text form ("3F5", "1RECV_B2") and the peer.
//
// # Slots
//
// A rank has Spec.Slots[rank] slots, a fixed array. A slot holds one chunk
// (stage, micro): its input x, saved context, output y, output gradient dy,
// input gradient dx, labels. A chunk's first step (DataLoad, RecvAct or
// Forward) claims the slot; every later step of the chunk must name the same
// slot, and the runtime checks that it does. Forward with src >= 0 takes x =
// y of slot src (the previous stage on this rank); Backward and BackwardInput
// with src >= 0 take dy = dx of slot src (the next stage on this rank).
// Forward on the last stage computes the loss from y and the labels and keeps
// dy in the slot.
//
// # The comm stream
//
// RecvAct, SendAct, RecvGrad and SendGrad are posted, not executed: they go to
// the rank's comm goroutine, which runs them one at a time in program order,
// as the strict execution model's comm stream does. The host thread (the one
// calling the methods) never blocks on a post. A compute step that consumes a
// receive (Forward for RecvAct, Backward/BackwardInput for RecvGrad) waits
// for that slot's receive to complete. A send captures the tensor at post time
// and the transport copies or writes it before the comm goroutine moves on,
// so reusing the slot later cannot corrupt it; Stages must not mutate a tensor
// after returning it. Receives are matched FIFO per (peer, channel) by the
// transport, and each message's tag (sender stage and micro) is checked.
// [Exec.Sync] waits for every posted comm op; [Run] calls it.
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
//	const _ = pipe.SupportPackageIsVersion1
//
// which breaks its build when this package no longer supports the API it was
// generated against. When the API changes incompatibly, abi.Version becomes
// 2, this package adds SupportPackageIsVersion2 (abi.VersionGuard, which the
// emitter writes) and, once
// the old API is dropped, removes SupportPackageIsVersion1, so stale
// generated code fails to compile with an undefined-name error that points at
// the guard instead of failing at run time.
//
// # Interpreter
//
// [Interpret] runs a program given as data ([]Op) through the same methods;
// generated files carry such tables with -table. [InterpretKeyed] does the
// same while keeping handles in maps keyed by (stage, micro), the way the
// Python runtimes do, as a baseline for what static slots and unrolling save.
package pipe

// SupportPackageIsVersion1 is referenced by generated code to assert that it
// is compatible with this version of the runtime API. See "Versioning"
// above; the version gen/emit writes is abi.Version, and its guard's name
// abi.VersionGuard (a test checks this package declares it).
const SupportPackageIsVersion1 = true
