// Package interleavedoverlap is ppgen's generated interleaved schedule at
// P=4, M=8, V=2 with -overlap -dxdw-in-overlap: each steady-state backward
// runs as the input-gradient half I together with the next forward
// (OVERLAP_B_F, x.OverlapBF), then the gradient send, then its W. One
// straight-line function per rank (Rank0..Rank3), the Ranks table, Spec,
// Fingerprint and, for the interpreter, the same program as data (Program).
// Regenerate with `go generate ./...`.
package interleavedoverlap

//go:generate go tool ppgen gen -schedule interleaved -ranks 4 -micro 8 -virtual 2 -overlap -dxdw-in-overlap -table -o schedule_gen.go
