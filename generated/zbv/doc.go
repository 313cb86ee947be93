// Package zbv is ppgen's generated zbv schedule at P=4, M=8 (V placement): one
// straight-line function per rank (Rank0..Rank3), the Ranks table, Spec,
// Fingerprint and, for the interpreter, the same program as data (Program).
// Regenerate with `go generate ./...`.
package zbv

//go:generate go tool ppgen gen -schedule zbv -ranks 4 -micro 8 -table -o schedule_gen.go
