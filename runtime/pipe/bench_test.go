package pipe_test

import (
	"testing"

	"gorgonia.org/tensor"

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
	// The floor: the same straight-line calls on floorExec, which makes the
	// same calls into the stages, loss, data source and optimizer hook with
	// no checks and no slot state. straight minus floor is what the
	// runtime's checks and bookkeeping cost.
	b.Run("floor", func(b *testing.B) {
		x := &floorExec{last: oneRankLocalSpec.Stages - 1, loss: noop{}, data: noop{}, opt: noop{}.OptStep}
		for s := range x.stages {
			x.stages[s] = noop{}
		}
		b.ReportAllocs()
		for b.Loop() {
			oneRankLocalFloor(x)
		}
		if x.err != nil {
			b.Fatal(x.err)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/steps, "ns/step")
	})
}

// floorExec has the packed step methods of pipe.Exec reduced to the calls
// they cannot avoid: one out-of-line call per step, and the stage, loss,
// data and optimizer calls of the step, passing one tensor along.
type floorExec struct {
	stages [4]pipe.Stage
	last   int
	loss   pipe.Loss
	data   pipe.DataSource
	opt    func() error
	t      *tensor.Dense
	saved  any
	err    error
}

//go:noinline
func (x *floorExec) Load(a pipe.At) {
	stage, micro, _, _ := a.Unpack()
	if stage == 0 {
		x.t, x.err = x.data.Input(micro)
	}
	if stage == x.last {
		x.t, x.err = x.data.Target(micro)
	}
}

//go:noinline
func (x *floorExec) F(a pipe.At) {
	stage, _, _, _ := a.Unpack()
	x.t, x.saved, x.err = x.stages[stage&3].Forward(x.t)
	if stage == x.last {
		_, x.t, x.err = x.loss.Loss(x.t, x.t)
	}
}

//go:noinline
func (x *floorExec) B(a pipe.At) {
	stage, _, _, _ := a.Unpack()
	st := x.stages[stage&3]
	dx, err := st.BackwardInput(x.saved, x.t)
	if err == nil {
		err = st.BackwardWeight(x.saved, x.t)
	}
	x.t, x.err = dx, err
}

//go:noinline
func (x *floorExec) OptStep() { x.err = x.opt() }
