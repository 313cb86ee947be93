// Package mpipe is ppgen's generated mpipe schedule at P=4, M=8, V=2: the
// interleaved 1F1B order with owned-micro data loading (micro-batches 1..3
// are loaded by ranks 1..3 during their warm-up and shipped to stage 0's
// rank with MPIPE_FWD_SEND/MPIPE_FWD_RECV): one straight-line function per
// rank (Rank0..Rank3), the Ranks table, Spec, Fingerprint and, for the
// interpreter, the same program as data (Program).
// Regenerate with `go generate ./...`.
package mpipe

//go:generate go tool ppgen gen -schedule mpipe -ranks 4 -micro 8 -virtual 2 -table -o schedule_gen.go
