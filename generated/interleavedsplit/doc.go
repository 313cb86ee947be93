// Package interleavedsplit is ppgen's generated interleaved schedule at P=4,
// M=8, V=2 with -split: every backward runs as I (input gradient) then W
// (weight gradient), with the gradient send between them. One straight-line
// function per rank (Rank0..Rank3), the Ranks table, Spec, Fingerprint and,
// for the interpreter, the same program as data (Program). Regenerate with
// `go generate ./...`.
package interleavedsplit

//go:generate go tool ppgen gen -schedule interleaved -ranks 4 -micro 8 -virtual 2 -split -table -o schedule_gen.go
