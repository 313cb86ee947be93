// Package ir defines ppgen's intermediate representation: the step kinds of a
// pipeline schedule, the placement of virtual stages on ranks, the per-rank
// step lists that make a Program, and the text and CSV forms used to exchange
// schedules with PyTorch's torch.distributed.pipelining and hyper-parallel.
//
// The package holds data and its string form only; schedules, passes,
// verification and simulation live in sibling packages.
package ir
