// Package shiplabels is ppgen's generated 1f1b schedule at P=4, M=8 with
// -ship-labels: only rank 0 reads data; each micro-batch's labels travel
// along the pipe ahead of its activations (DATA_SEND/DATA_RECV) to the last
// stage's rank. One straight-line function per rank (Rank0..Rank3), the
// Ranks table, Spec, Fingerprint and, for the interpreter, the same program
// as data (Program). Regenerate with `go generate ./...`.
package shiplabels

//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -ship-labels -table -o schedule_gen.go
