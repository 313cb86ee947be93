// Package zbvtie is ppgen's generated zbv schedule at P=4, M=8 with
// stages 0 and 7 tied (`-tie 0:7`): the V places both on rank 0, so its
// TIE_GRAD sums the two copies' gradients locally. One straight-line
// function per rank (Rank0..Rank3), the Ranks table, Spec (with its Ties),
// Fingerprint and, for the interpreter, the same program as data
// (Program). Regenerate with `go generate ./...`.
package zbvtie

//go:generate go tool ppgen gen -schedule zbv -ranks 4 -micro 8 -tie 0:7 -table -o schedule_gen.go
