// Package onef1b is ppgen's generated 1f1b schedule at P=4, M=8: one
// straight-line function per rank (Rank0..Rank3), the Ranks table, Spec,
// Fingerprint and, for the interpreter, the same program as data (Program).
// Regenerate with `go generate ./...`.
package onef1b

//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -table -o schedule_gen.go
