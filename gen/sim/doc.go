// Package sim is ppgen's cost model and discrete-event simulator: it times a
// program under the strict execution model of docs/internals.md and renders
// the result as metrics, a terminal grid, a Chrome trace and an SVG timeline.
//
// # Cost model
//
// Cost gives per-stage costs of F, B (full backward), I and W (its two
// halves), a latency per transfer (comm), optionally activation sizes and
// a bandwidth (act, bw: an activation or gradient transfer then takes
// comm + size/bw), and costs of the local steps (DATA_LOAD, REDUCE_GRAD,
// OPT_STEP), of an FSDP all-gather (UNSHARD) and of a swap transfer.
// ParseCost reads the command-line form "F=1,B=2,W=1,comm=0" with per-stage
// lists "F=1:1:1:1.4". Keys not given keep their defaults, F=1, B=2, W=1,
// I=B−W, everything else 0, and B = I + W always (of B, I and W a key not
// given is derived from the other two; see Cost); values are finite, at
// most MaxCost.
//
// # Timing rules
//
// Every rank has a host that walks its program in order, a compute stream,
// a comm stream, a swap stream and an FSDP collective stream. Time starts
// at 0.
//
//   - Compute steps (F, B, I, W, overlaps) block the host: a compute step
//     starts when the host reaches it (the previous host step ended) and
//     every input it consumes is ready, and ends after its cost.
//   - The inputs of a compute step are those of the one dependency model,
//     gen/internal/deps (which gen/verify and gen/passes read too), each
//     ready when the receive of the step's own chunk that carries it
//     completes, when the rank has that receive, and otherwise at the end
//     of the producer (plus Cost.Comm and the transfer time when it ran on
//     another rank): F(s,m) consumes, for s > 0, RECV_F(s,m) or F(s−1,m),
//     and the rank's DATA_RECV(s,m) when it has one (shipped labels); for
//     s = 0, its MPIPE_FWD_RECV(s,m) when it has one (an owned input).
//     B/I(s,m) consumes F(s,m) and, for s < S−1, RECV_B(s,m) or
//     B/I(s+1,m). W(s,m) consumes I(s,m) (or the B(s,m) gen/verify
//     rejects). So a compute-only program (no transfers) is timed with a
//     latency per cross-rank edge, as the timed comm order's ideal
//     timeline is, colocated neighbours (the turn of a V) cost nothing,
//     and a lowered program missing a receive still gets a latency for that
//     edge rather than none. With several model copies (ir.Program.Copies)
//     "s > 0" and "s < S−1" read "inside micro m's route" (Program.Route).
//   - A compute step on stage s also waits for the end of the latest
//     UNSHARD s before it on its rank, when there is one (the parameters
//     it computes with); an overlap waits for those of both its stages.
//   - An OVERLAP_F_B / OVERLAP_B_F step is one compute step consuming the
//     inputs of both sub-steps; it takes max(a, b) + Cost.Overlap·min(a, b)
//     where a and b are its sub-steps' costs (default: max(a, b)).
//   - Transfers (SEND_F, RECV_F, SEND_B, RECV_B, DATA_SEND, DATA_RECV) are
//     posted when the host reaches them (after every preceding host step
//     ended; the host does not block on them) and run in program order on
//     the rank's comm stream. Sends and receives are matched FIFO per
//     (source rank, destination rank, channel). A matched pair starts at
//     max(both posted, both streams free of earlier transfers) and both
//     halves complete Cost.Comm later (rendezvous), plus size/Cost.BW for
//     an activation or gradient with a bandwidth (Cost.Act).
//   - A batch (BATCH_BEGIN, then the run of transfers after it, up to
//     BATCH_END) is posted together and runs its transfers concurrently:
//     once the stream is free of what came before the batch, each starts
//     when its partner is ready and takes its own time; the stream is free
//     again, and the compute steps consuming its receives may start, when
//     the last of them ends. The brackets cost nothing.
//   - UNSHARD (the FSDP all-gather) is asynchronous, as FSDP2's
//     unshard(async_op=True) is: the host posts it to the rank's FSDP
//     stream when it reaches the step and goes on; it runs there in program
//     order for Cost.Unshard, starting at max(posted, the stream free of
//     earlier UNSHARDs). So an UNSHARD placed ahead of its first use (the
//     FSDP pass's prefetch) hides behind the compute steps between.
//   - DATA_LOAD, RESHARD (free), REDUCE_GRAD and OPT_STEP run on the host
//     for their cost and block it. (REDUCE_GRAD is kept host-blocking, a
//     pessimistic simplification: running the reduce-scatter on a stream
//     behind the remaining backwards would also make OPT_STEP wait for it.)
//   - TIE_GRAD (-tie A:B) blocks the host. Across two ranks the pair is a
//     rendezvous: both start at the latest of the two hosts reaching it and
//     the ends of the last transfer of each rank before it, and take
//     Cost.TieTime (Comm, plus min(Param[A], Param[B])/BW when parameter
//     sizes are given); within one rank it takes TieTime on the host.
//   - SWAP_LAUNCH_OFFLOAD / SWAP_LAUNCH_LOAD are posted to the swap stream
//     (in order, Cost.Swap each); SWAP_WAIT_OFFLOAD / SWAP_WAIT_LOAD block
//     the host until the latest earlier launch of the same kind and chunk
//     ends.
//
// The dependency graph has no choices, so one simulation decides whether
// the program completes. When it does not, Run returns a *DeadlockError
// naming every stuck rank, the step its host is blocked at and what it waits
// for, and the head of its comm stream and its partner; unmatched transfers
// and steps waiting for steps that no rank runs are reported likewise. All
// such errors wrap ErrStuck.
//
// # Metrics
//
// Makespan is the end of the last event. Bubble is the whole-iteration bubble
// 1 − ΣBusy/(P·Makespan); BubbleSpan the stage-span bubble Σ(Span−Busy)/ΣSpan
// with Span from each rank's first compute start to its last compute end.
// Busy counts model compute only. PeakActivations counts live chunks per
// rank (see Result). Results are deterministic: Events hold every step in
// rank order, then program order.
//
// # Rendering
//
// Grid draws a text grid for terminals, Trace a Chrome trace-event file
// (Perfetto, chrome://tracing; one cost unit = 1 ms), SVG and SVGCompare an
// SVG timeline. All outputs are deterministic bytes.
package sim
