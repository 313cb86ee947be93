// Package dualpipev is ppgen's generated dualpipev schedule at P=4, M=8 (V=2,
// v placement): one straight-line function per rank (Rank0..Rank3), the Ranks
// table, Spec, Fingerprint and, for the interpreter, the same program as data
// (Program). Its OVERLAP_F_B steps run a forward and a full backward of two
// micro-batches together (x.OverlapFB). Regenerate with `go generate ./...`.
package dualpipev

//go:generate go tool ppgen gen -schedule dualpipev -ranks 4 -micro 8 -table -o schedule_gen.go
