// Package onef1btie is ppgen's generated 1f1b schedule at P=4, M=8 with
// stages 0 and 3 tied (`-tie 0:3`: they hold one copy each of a shared
// parameter, whose gradients TIE_GRAD sums across ranks 0 and 3 before
// OPT_STEP): one straight-line function per rank (Rank0..Rank3), the Ranks
// table, Spec (with its Ties), Fingerprint and, for the interpreter, the
// same program as data (Program). Regenerate with `go generate ./...`.
package onef1btie

//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -tie 0:3 -table -o schedule_gen.go
