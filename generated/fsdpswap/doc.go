// Package fsdpswap is ppgen's generated 1f1b schedule at P=4, M=8 with FSDP
// steps (-fsdp 1: UNSHARD before a stage computes, REDUCE_GRAD and RESHARD
// after its last backward) and activation swapping (-swap 2: SWAP_* steps
// around the chunks whose forward and backward are at least two compute
// steps apart): one straight-line function per rank, the Ranks table, Spec,
// Fingerprint and, for the interpreter, the same program as data
// (Program). Stages that implement pipe.Sharded and pipe.Swapper act on the
// steps; others ignore them. Regenerate with `go generate ./...`.
package fsdpswap

//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -fsdp 1 -swap 2 -table -o schedule_gen.go
