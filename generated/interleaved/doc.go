// Package interleaved is ppgen's generated interleaved schedule at P=4, M=8, V=2: one
// straight-line function per rank (Rank0..Rank3), the Ranks table, Spec,
// Fingerprint and, for the interpreter, the same program as data (Program).
// Regenerate with `go generate ./...`.
package interleaved

//go:generate go tool ppgen gen -schedule interleaved -ranks 4 -micro 8 -virtual 2 -table -o schedule_gen.go
