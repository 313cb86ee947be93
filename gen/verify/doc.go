// Package verify proves a ppgen program safe, or says precisely why it is
// not (docs/design.md §6, docs/internals.md).
//
// Check runs, in order, and stops at the first failure:
//
//  1. structure: known kinds; stages, micro-batches and peers in range; every
//     step on the rank holding its stage; peers as the placement says; no
//     transfer between colocated stages; overlap steps holding one forward
//     and one backward; no duplicated step (a second F, B/I, W, DATA_LOAD or
//     transfer of one chunk); batches (BATCH_BEGIN .. BATCH_END) closed, not
//     nested, holding at least one transfer and nothing else, and no
//     DATA_SEND of labels the same batch receives (batch.go);
//  2. preconditions, in program order: F has its input (a RECV_F, the
//     previous stage's F on this rank, or for stage 0 its DATA_LOAD when the
//     program has data steps) and, on the last stage, its labels; B and I
//     follow their F and have their output gradient (a RECV_B, the next
//     stage's B/I on this rank, or the loss on the last stage); W follows
//     its I; SEND_F follows its F, SEND_B its B/I; DATA_SEND has the data;
//     OPT_STEP comes after every compute step of its rank. The two
//     sub-steps of an overlap run together: neither may feed the other;
//  3. completeness: OPT_STEP runs on every rank or on none (a rank without
//     it would never update its weights); every (stage, micro) has one F
//     and one backward (B, or I then W). With several model copies (ir.Program.Copies) "every
//     (stage, micro)" means the stages of the micro's route
//     (ir.Program.Route), a step outside its route is a structure error, and
//     "stage 0", "the last stage" and neighbours are those of the route;
//     then the rules of the kinds that have one (rule.go, declared in each
//     kind's file, run in kind order): TIE_GRAD's ties (tie.go), the
//     collectives' counts (collective.go: ALL_REDUCE; GATHER_LOSS, which
//     gatherloss.go also puts after its rank's losses), RECOMPUTE's (recompute.go: once per chunk of a
//     recomputing stage, every chunk of it, after its F and before its first
//     backward);
//  4. matching (lowered programs): sends and receives pair FIFO per (source
//     rank, destination rank, channel), every one has a partner, and
//     partners agree (SEND_F(s,m) with RECV_F(s+1,m), SEND_B(s,m) with
//     RECV_B(s-1,m), DATA_SEND(s,m) with DATA_RECV(s+1,m));
//  5. deadlock freedom under the strict model (gen/internal/strict; one
//     simulation decides), each compute step waiting for the receives of
//     what it consumes (gen/internal/deps, the model gen/sim and gen/passes
//     read too), the rendezvous of TIE_GRAD and ALL_REDUCE added by their
//     rules, a batch running as a unit: its transfers complete in any
//     order, and what comes after it on the stream and what consumes one
//     of its receives waits for all of them. A program without transfers is compute-only: then each
//     compute step waits for its producer on another rank, and a
//     cross-rank dependency cycle is a deadlock too;
//  6. memory: peak live chunks per rank (from F to the last backward, W or B;
//     a chunk with a RECOMPUTE only at its F and from its RECOMPUTE on, or
//     with the share its F keeps in between under a selective policy:
//     Report.PeakLive, counted in parts of a chunk)
//     within Options.MaxActivations, and, when slots are assigned, one slot
//     per chunk and no two chunks of one slot live at once (the lifetime
//     docs/internals.md "Buffer slots" defines).
//
// Errors are *Error (rank, step index, step, Code, reason) or *DeadlockError
// (the ring of ranks and the step each is blocked on). Error.Malformed tells
// a program with a malformed step (a stage, micro-batch or rank outside it:
// the CLI's bad input) from a well-formed one that is unsafe, a chunk
// without its forward or backward included.
package verify
