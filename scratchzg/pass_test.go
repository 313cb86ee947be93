package scratchzg

import (
	"testing"

	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

func TestPassVerifyEmitSim(t *testing.T) {
	p, err := schedules.Build(ir.Config{Schedule: "interleaved", Ranks: 2, Micro: 4, Virtual: 2})
	if err != nil {
		t.Fatal(err)
	}
	q, info, err := passes.Lower(p, passes.Options{ZeroGrad: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(info.Passes, q.Ranks[0][:3])
	if _, err := verify.Check(q, verify.Options{}); err != nil {
		t.Fatal(err)
	}
	src, err := emit.Emit(q, emit.Options{Package: "x", Table: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(len(src))
	r, err := sim.Run(q, sim.DefaultCost())
	t.Log(r.Makespan, err)
}
