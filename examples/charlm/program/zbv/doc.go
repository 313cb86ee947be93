// Package zbv is examples/charlm's programs under -schedule zbv, generated
// by ppgen at P=4, M=8 (V placement: rank r holds stages r and 7-r, so the
// embedding's stage 0 and the head's stage 7 share rank 0): the training
// program (schedule_gen.go: one straight-line function per rank,
// Rank0..Rank3, the Ranks table, Spec, Fingerprint and the program as data,
// Program, which names -trace's calls) and, generated beside it with -name
// Eval, the validation program (eval_gen.go: -forward-only, zbv's forwards
// in the family's order with their transfers and data loads, no backward
// and no OPT_STEP; EvalSpec, EvalRanks). Both run in one world, which checks
// both fingerprints at one rendezvous (pipe.Fingerprints). Regenerate with
// `go generate ./...`.
package zbv

//go:generate go tool ppgen gen -schedule zbv -ranks 4 -micro 8 -table -tie 0:7 -o schedule_gen.go
//go:generate go tool ppgen gen -schedule zbv -ranks 4 -micro 8 -forward-only -name Eval -o eval_gen.go
