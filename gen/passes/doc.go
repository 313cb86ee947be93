// Package passes lowers a compute-only schedule (the F, B, I, W and overlap
// steps gen/schedules builds) into a runnable program: data loads, the
// point-to-point transfers between ranks, and static buffer slots.
//
// Each pass is a function from ir.Program to ir.Program with its own tests,
// one file per pass. Passes never modify their input: they return a new
// program (sub-step slices included whenever a pass writes into them).
//
//	Overlap        pair each backward that a forward follows into (B;F)OVERLAP_B_F
//	DxDwInOverlap  the backward inside an overlap as I, its W right after the composite
//	Split          B -> I then W
//	FillW          W steps float later into bubbles (peak live chunks kept)
//	InsertData     DATA_LOAD before the F of stage 0 (inputs) and of the last stage (labels)
//	InsertComm     SEND right after each producer, RECV as late as the strict model allows
//	Recompute      RECOMPUTE before each chunk's first backward; its F keeps only the input
//	AssignSlots    one buffer slot per chunk (stage, micro), lowest free first
//
// Lower runs the default pipeline (see Pipeline, the extension point for the
// split, overlap, FSDP and swap passes) and reports slots and recv distance.
// A newer pass declares its user-visible option in its own file (Option,
// Declared: -gather-loss, -recompute), which gen/gencmd binds as a flag of every command
// and Pipeline places by Option.Before.
// The contracts these passes implement are in docs/internals.md. With
// several model copies (ir.Program.Copies, dualpipe) every pass takes stage
// 0, the last stage and the neighbours s±1 of a chunk from its micro-batch's
// route (ir.Program.Route), and a step off its route is an error.
package passes
