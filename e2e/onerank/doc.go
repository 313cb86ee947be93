// Package onerank is ppgen's generated interleaved schedule on one rank
// holding four stages (P=1, V=4, M=64): 641 steps whose neighbours are all
// local (source slots), the program of BenchmarkStepOverhead. Regenerate
// with `go generate ./...`.
package onerank

//go:generate go tool ppgen gen -schedule interleaved -ranks 1 -virtual 4 -micro 64 -table -o schedule_gen.go
