package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// TestBatchedMatchesSequential lowers every family at P=4, M=8 with -batch
// (passes.Coalesce), runs the emitted table through Interpret over the
// in-process transport and TCP (neither has its own Batcher, so a batch is
// transport.Batch's sends-then-receives), and requires the losses and
// parameters to equal a sequential run exactly.
func TestBatchedMatchesSequential(t *testing.T) {
	cfgs := []ir.Config{
		{Schedule: "gpipe", Ranks: 4, Micro: 8},
		{Schedule: "1f1b", Ranks: 4, Micro: 8},
		{Schedule: "interleaved", Ranks: 4, Micro: 8},
		{Schedule: "looped-bfs", Ranks: 4, Micro: 8},
		{Schedule: "zb-h1", Ranks: 4, Micro: 8},
		{Schedule: "zb-h2", Ranks: 4, Micro: 8},
		{Schedule: "interleaved-zb", Ranks: 4, Micro: 8},
		{Schedule: "zbv", Ranks: 4, Micro: 8},
		{Schedule: "v-half", Ranks: 4, Micro: 8},
		{Schedule: "v-min", Ranks: 4, Micro: 8},
	}
	opt := gen.Options{Passes: passes.Options{Batch: true}}
	for _, cfg := range cfgs {
		p := lowered(t, cfg, opt)
		batches := 0
		for _, ops := range p.ops {
			for _, op := range ops {
				if op.Kind == pipe.OpBatchBegin {
					batches++
				}
			}
		}
		if batches == 0 {
			t.Errorf("%s: no batch in the lowered program", p.name)
		}
		for _, tk := range []string{"inproc", "tcp"} {
			if tk == "tcp" && testing.Short() && cfg.Schedule != "1f1b" && cfg.Schedule != "zbv" {
				continue
			}
			t.Run(fmt.Sprintf("%s/%s", p.name, tk), func(t *testing.T) {
				var trs []transport.Transport
				if tk == "inproc" {
					trs = inprocWorld(p.spec.Ranks, 20*time.Second)
				} else {
					trs = tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil)
				}
				g := newRig(t, p, trs, false)
				got := g.train(t, 2, rankFns(p, "interp"))
				checkAgainstSequential(t, g, got, false)
			})
		}
	}
}
