// Package ir defines ppgen's intermediate representation: the steps of a
// pipeline schedule (their kinds are the boundary package abi's, shared with
// runtime/pipe, under the names Kind, Forward, SendF, ...), the placement of virtual stages on ranks, the per-rank
// step lists that make a Program, and the text and CSV forms used to exchange
// schedules with PyTorch's torch.distributed.pipelining and hyper-parallel.
//
// The package holds data and its string form only; schedules, passes,
// verification and simulation live in sibling packages. It also fixes the
// size limits every program is checked against before anything sized by it
// is allocated (MaxIndex, MaxChunks, MaxSteps; CheckSize): its readers
// (ReadText, ReadCSV) stream, range-check every number as they parse it and
// stop at the first error.
package ir
