// Package swap moves the saved activations of pipeline chunks out of the
// working set and back (activation swapping, docs/design.md §9). A schedule lowered
// with `ppgen gen -swap N` holds, per swapped chunk, SWAP_LAUNCH_OFFLOAD
// after its forward, SWAP_WAIT_OFFLOAD where the schedule counts it as out,
// SWAP_LAUNCH_LOAD before its backward and SWAP_WAIT_LOAD where it must be
// back; runtime/pipe calls a stage's pipe.Swapper methods at those steps.
// runtime/nn's WithSwap makes a Sequential such a stage, on a Tier of this
// package.
//
// # Tiers
//
// A Tier is where the data goes. NewHost keeps it in host buffers that the
// tier allocates and owns; NewFile writes one file per offload in a new
// directory under a directory you give, and removes the file on Load and the
// directory on Close.
//
// Each file is checked on Load before its data is used: a header names the
// tier (a random identity), the offload's number and tag, the dtypes and
// shapes, and the payload's length, under a CRC-32, and the payload has a
// CRC-32 of its own. A file changed in place, truncated, exchanged with
// another chunk's or with another tier's fails the Load with an error naming
// the chunk's tag and the file; the header's counts are bounded before
// anything is allocated from them. The directory is named
// ppgen-swap-PID-RANDOM and the tier holds an exclusive flock(2) on a lock
// file in it while it lives; NewFile removes the sibling directories whose
// lock is free, those of processes that died without Close (on systems
// without flock, such as Windows, nothing is removed). While a file tier
// lives, a terminating signal (SIGINT, SIGTERM, SIGHUP: a launcher's or
// mpirun's end of a job, Ctrl-C) removes its directory before the process
// dies of it (signals.go), unless the process ignored it from its start
// (SIGHUP under nohup: it stays ignored); only SIGKILL leaves one, for the
// next NewFile. Both take float32 and float64 *tensor.Dense values
// (gorgonia.org/tensor) and give them back bit-identical: same dtype, same
// shape, same bits (NaN payloads included). A tensor listed twice in one
// offload, as runtime/nn contexts share one tensor between a layer's output
// and the next layer's input, is moved once and comes back as one tensor.
//
// # Asynchronous moves
//
// Offload checks the tensors, starts the copy on a goroutine and returns a
// Handle at once; the caller drops its own references and the tier drops its
// references when the copy ends. Wait blocks until the copy has ended
// (runtime/pipe calls it at SWAP_WAIT_OFFLOAD through pipe.SwapWaiter) and
// returns the copy's error. Load is synchronous: it waits for the copy if it
// is still running, reads the data back and returns the tensors, so
// SWAP_WAIT_LOAD has nothing left to wait for. An error of the background
// copy is kept in the handle and returned by the next Wait or Load on it,
// naming the tier, the handle's tag (e.g. "stage 1 forward #5") and the byte
// count. Misuse (a second Load, a handle of another tier, a nil or made-up
// handle, calls after Close) gives errors, never panics.
//
// # Accounting
//
// The tier counts what is resident and what is out (Stats). A wrapper that
// owns saved contexts (runtime/nn's WithSwap) calls Track when a forward
// produces one, Resize when a backward changes it and Untrack when its last
// backward frees it; the tier subtracts whatever is offloaded. So
// PeakResidentChunks and PeakResidentBytes are the measured counterpart of
// the peak that ppgen's verifier (gen/verify, Report.PeakActivations)
// proves for a swapped program: a chunk counts from its forward to its last
// backward, except between the end of its offload and its load.
//
// # Example
//
//	tier := swap.NewHost() // or swap.NewFile(dir)
//	defer tier.Close()
//	h, err := tier.Offload([]*tensor.Dense{x, y}, "stage 0 chunk 3")
//	// ... x and y may be dropped and collected; compute goes on ...
//	ts, err := tier.Load(h) // ts[0], ts[1]: equal to x, y bit for bit
package swap
