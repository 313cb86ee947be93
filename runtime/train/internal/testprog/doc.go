// Package testprog holds the programs runtime/train's tests run, generated
// by ppgen for an 8-layer model (model.json: Spec.Layers records the
// split), several per package (-name): a 1f1b program at P=4 and its
// forward-only eval program, zbv at P=2, 1f1b at P=4 with half the
// micro-batches (for two data-parallel replicas), dualpipe, a -clip
// program, one with a tie, one rank, mpipe, shipped labels, and what
// `-schedule auto -partition auto` picks for uneven.json (an uneven split
// of the same 8 layers), and 1f1b with FSDP steps at half the
// micro-batches (two sharded replicas); 1f1b with swap steps (-swap 2)
// and its program as data (-table: SwapProgram, for pipe.Interpret); and
// 1f1b recomputing every stage whole, half of each stage's layers, and
// the layers marked.json marks "recompute": true (the second of stages
// 0..2, not a prefix: -recompute model), and FSDP's program recomputing
// half of each stage's layers.
// Regenerate with `go generate`.
package testprog

//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -model model.json -name OneF1B -o onef1b_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -model model.json -forward-only -name Eval -o eval_gen.go
//go:generate go tool ppgen gen -schedule zbv -ranks 2 -micro 8 -model model.json -name ZBV -o zbv_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 4 -model model.json -name Half -o half_gen.go
//go:generate go tool ppgen gen -schedule dualpipe -ranks 4 -micro 8 -model model.json -name Dual -o dual_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -model model.json -clip -name Clip -o clip_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -model model.json -tie 0:3 -name Tie -o tie_gen.go
//go:generate go tool ppgen gen -schedule gpipe -ranks 1 -micro 8 -model model.json -name Single -o single_gen.go
//go:generate go tool ppgen gen -schedule mpipe -ranks 4 -micro 8 -virtual 2 -model model.json -name Mpipe -o mpipe_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -ship-labels -model model.json -name Ship -o ship_gen.go
//go:generate go tool ppgen gen -schedule auto -ranks 4 -micro 8 -model uneven.json -partition auto -name Auto -o auto_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 4 -fsdp 1 -model model.json -name FSDP -o fsdp_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -swap 2 -table -model model.json -name Swap -o swap_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -model model.json -recompute full -name Recompute -o recompute_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -model model.json -recompute selective:0.5 -name Selective -o selective_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -model marked.json -recompute model -name Marked -o marked_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 4 -fsdp 1 -model model.json -recompute selective:0.5 -name FSDPSelective -o fsdpselective_gen.go
//go:generate go tool ppgen gen -schedule 1f1b -ranks 4 -micro 8 -model model.json -swap 4 -recompute selective:2=0.5,3=1 -name SwapRecompute -o swaprecompute_gen.go
