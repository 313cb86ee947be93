// Package checkpoint saves and restores a pipeline-parallel training job's
// state keyed by model layer, not by rank, so that a job saved under one
// layout (schedule, pipeline degree P, partition of layers into stages,
// data-parallel degree, FSDP) resumes under another.
//
// A checkpoint is a directory: manifest.json (Manifest: format version,
// step, the Layout that wrote it, every shard's file, size, CRC-32C and
// layers, and the job's small named state: LR schedule, data position,
// RNG) plus one shard file per world rank holding that rank's parameters
// and their optimizer state by (layer, parameter name) (Shard, Param), the
// chunks of its FSDP-sharded stages (Flat) and per-rank opaque blobs.
// docs/checkpoints.md documents both formats.
//
// Save writes atomically: every rank writes its shard to a temporary file,
// syncs and renames it under a name carrying a new generation number;
// after a barrier rank 0 writes the manifest the same way (temporary file,
// fsync, rename, fsync of the directory) and removes the previous
// generation's files; a second barrier ends the save on every rank. A save
// killed at any point leaves the previous manifest and the files it names
// intact, so the previous checkpoint still loads; a save into the
// directory of an existing checkpoint never mixes shards of two saves.
//
// Open reads and checks the manifest and that every shard file is there
// with its recorded size; reading a shard checks its magic, version, every
// length (each is range-checked against the bytes left before it sizes an
// allocation) and its CRC-32C, and an error names the file. Layers returns
// the parameters of the layers a rank now holds from whichever shards hold
// them — the layout that reads need not be the one that wrote: data-parallel
// replicas are identical copies (any one serves), and FSDP chunks are
// gathered from every member of their group and split back into
// parameters; SplitFlat re-splits parameters for another FSDP degree.
//
// The package uses only the standard library (the ppgen command links it
// for `ppgen checkpoint inspect` and `convert`); runtime/checkpoint/
// nncheckpoint converts runtime/nn's parameters and makes Save's barrier
// of a collective.Comm.
package checkpoint
