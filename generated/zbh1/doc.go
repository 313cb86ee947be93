// Package zbh1 is ppgen's generated zb-h1 schedule at P=4, M=8: one
// straight-line function per rank (Rank0..Rank3), the Ranks table, Spec,
// Fingerprint and, for the interpreter, the same program as data (Program).
// Regenerate with `go generate ./...`.
package zbh1

//go:generate go tool ppgen gen -schedule zb-h1 -ranks 4 -micro 8 -table -o schedule_gen.go
