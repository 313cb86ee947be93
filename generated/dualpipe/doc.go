// Package dualpipe is ppgen's generated dualpipe schedule at P=4, M=8: two
// copies of a 4-stage model fed from both ends (stages 0-3 are copy A, on
// ranks 0-3; stages 4-7 copy B, on ranks 3-0), one straight-line function
// per rank (Rank0..Rank3), the Ranks table, Spec (Copies: 2, so OPT_STEP
// sums each stage's gradients with its twin's), Fingerprint and, for the
// interpreter, the same program as data (Program). Its OVERLAP_F_B steps run
// a forward of one copy with a backward of the other. Regenerate with
// `go generate ./...`.
package dualpipe

//go:generate go tool ppgen gen -schedule dualpipe -ranks 4 -micro 8 -table -o schedule_gen.go
