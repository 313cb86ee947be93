//go:build mpi

package mpi

import "github.com/ppgen/ppgen/runtime/transport"

// QueueStats is tr's receive queue from peer now and at its peak, in
// charged bytes and messages (tr: an MPI transport).
func QueueStats(tr transport.Transport, peer int) (bytes int64, frames int, peakBytes int64, peakFrames int) {
	return tr.(*mpiT).queueStats(peer)
}
