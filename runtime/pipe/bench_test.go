package pipe_test

import (
	"testing"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// BenchmarkStepOverhead measures the runtime's own cost per step: one rank
// holding four stages (local neighbours, src slots), 64 micro-batches of
// 1F1B, 641 steps per iteration, with stages, loss and data that do nothing.
// One op is one iteration (Reset + program); ns/step is the figure to read.
//
//	go test -run '^$' -bench StepOverhead ./runtime/pipe/
func BenchmarkStepOverhead(b *testing.B) {
	ops := progByName(b, "oneRankLocal").ops[0]
	steps := float64(len(ops))
	for _, bc := range []struct {
		name string
		run  func(x *pipe.Exec) error
	}{
		{"straight", oneRankLocalRank0},
		{"interpret", func(x *pipe.Exec) error { return pipe.Interpret(x, ops) }},
		{"keyed", func(x *pipe.Exec) error { return pipe.InterpretKeyed(x, ops) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			x := newNoopExec(b)
			defer x.Close()
			b.ReportAllocs()
			for b.Loop() {
				x.Reset()
				if err := bc.run(x); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/steps, "ns/step")
		})
	}
}
