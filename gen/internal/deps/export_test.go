package deps

import "github.com/ppgen/ppgen/gen/ir"

// Consumer is ConsumerRank with the consumer's step (as Kind Backward for
// a B or an I), for the tests: they check it inverts Neighbour.
func Consumer(p *ir.Program, cs ir.Step) (consumer ir.Step, rank int, ok bool) {
	k, s, rank, ok := consumerOf(p, cs.Kind, cs.Stage, cs.Micro)
	if ok {
		consumer = ir.Compute(k, s, cs.Micro)
	}
	return consumer, rank, ok
}
