// Package zbvbatch is ppgen's generated zbv schedule at P=4, M=8 with
// -batch: each run of adjacent transfers of a rank is one batch
// (x.BatchBegin() .. x.BatchEnd()), issued as one group by the transport.
// One straight-line function per rank (Rank0..Rank3), the Ranks table,
// Spec, Fingerprint and, for the interpreter, the same program as data
// (Program). Regenerate with `go generate ./...`.
package zbvbatch

//go:generate go tool ppgen gen -schedule zbv -ranks 4 -micro 8 -batch -table -o schedule_gen.go
