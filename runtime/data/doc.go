// Package data reads and writes token shards and samples training windows
// from them: the data side of a training job (docs/data.md).
//
// A shard is one flat file: a 32-byte header (magic, format version, token
// width, vocabulary size, token count, CRC-32C of the tokens, CRC-32C of
// the header) followed by the tokens, little-endian uint16 or uint32.
// [Create] writes one atomically (a temporary file in the same directory,
// fsync, rename); [Open] validates the header, the file size and the
// checksum, and [Shard.ReadAt] reads a window of tokens by offset with
// [os.File.ReadAt] through a bounded buffer, never loading the file.
//
// A [Sampler] draws, for a step, a micro-batch and a data-parallel replica,
// the windows of SeqLen+1 tokens that micro-batch reads: a pure function of
// (seed, step, global sequence index) over the shard set, so that replicas
// get disjoint windows within a step and a run resumed at step N reads what
// an uninterrupted run reads. Its checkpoint state is a [Position]: the
// seed, the step and the shards' identities.
//
// A [Prefetcher] reads the next steps' windows on a goroutine, bounded in
// steps and bytes, and a [Source] turns a step's tokens into the inputs and
// targets of runtime/pipe's DataSource (token ids as [rows, 1] columns).
package data
