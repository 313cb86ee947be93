package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/runtime/transport"
)

// TestForwardOnlyMatchesSequential lowers the forward-only program
// (-forward-only) of every family that has one copy of the model at P=4,
// M=8, runs it through Interpret (in-process; TCP for two of them) for two
// iterations, and requires each micro-batch's loss to equal a sequential
// forward pass exactly, with the parameters untouched: a forward-only
// program has no backward and no OPT_STEP.
func TestForwardOnlyMatchesSequential(t *testing.T) {
	opt := gen.Options{Passes: passes.Options{ForwardOnly: true}}
	ran := 0
	for _, f := range schedules.All() {
		if f.ComputeOnly != "" {
			continue
		}
		cfg := ir.Config{Schedule: f.Name, Ranks: 4, Micro: 8}
		if _, compute, err := gen.Build(cfg); err != nil || compute.Copies > 1 {
			continue // a size the family refuses; dualpipe's two model copies (TestForwardOnlyLowersEveryFamily)
		}
		p := lowered(t, cfg, opt)
		if !p.spec.ForwardOnly {
			t.Fatalf("%s: Spec.ForwardOnly not set", p.name)
		}
		for _, tk := range []string{"inproc", "tcp"} {
			if tk == "tcp" && f.Name != "1f1b" && f.Name != "zbv" {
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
				ref := tame(newStages(p.spec.Stages))
				want := sequentialForward(ref, p.spec.Micro, 2)
				for it := range want {
					if !sameFloats(got[it], want[it]) {
						t.Errorf("iteration %d losses:\n got %v\nwant %v", it, got[it], want[it])
					}
				}
				for s := range ref {
					if g.stages[s].A != ref[s].A || g.stages[s].B != ref[s].B {
						t.Errorf("stage %d params changed: (%v, %v), want (%v, %v)", s, g.stages[s].A, g.stages[s].B, ref[s].A, ref[s].B)
					}
				}
			})
		}
		ran++
	}
	if ran < 10 {
		t.Errorf("only %d families ran forward-only", ran)
	}
}

// TestForwardOnlyLowersEveryFamily: every family's forward-only program
// verifies as one (no backward, no OPT_STEP, one live chunk per rank),
// dualpipe's included.
func TestForwardOnlyLowersEveryFamily(t *testing.T) {
	for _, f := range schedules.All() {
		if f.ComputeOnly != "" {
			continue
		}
		cfg := ir.Config{Schedule: f.Name, Ranks: 4, Micro: 8}
		if _, _, err := gen.Build(cfg); err != nil {
			continue
		}
		res, err := gen.Lower(cfg, gen.Options{Passes: passes.Options{ForwardOnly: true}})
		if err != nil {
			t.Errorf("%s: %v", f.Name, err)
			continue
		}
		if !res.Report.ForwardOnly {
			t.Errorf("%s: not verified as forward-only", f.Name)
		}
		fs := 0
		for r, steps := range res.Program.Ranks {
			for _, st := range steps {
				switch {
				case st.Kind == ir.Forward:
					fs++
				case st.Kind.IsBackward(), st.Kind == ir.BackwardWeight, st.Kind.IsOverlap(), st.Kind == ir.OptStep, st.Kind == ir.RecvB, st.Kind == ir.SendB:
					t.Errorf("%s rank %d: %s in a forward-only program", f.Name, r, st)
				}
			}
			if res.Report.PeakActivations[r] > 1 {
				t.Errorf("%s rank %d: %d chunks live at once, want at most 1", f.Name, r, res.Report.PeakActivations[r])
			}
		}
		if want := res.Program.Stages() / max(res.Program.Copies, 1) * res.Program.Micro; fs != want {
			t.Errorf("%s: %d forwards, want %d (every chunk on its route once)", f.Name, fs, want)
		}
	}
}

// sequentialForward returns each iteration's per-micro-batch losses of the
// stages run forward in sequence, parameters never stepped.
func sequentialForward(stages []*affine, micro, iters int) [][]float64 {
	var out [][]float64
	for it := range iters {
		d := &data{Iter: it}
		losses := make([]float64, micro)
		for m := range micro {
			x, _ := d.Input(m)
			for _, st := range stages {
				x, _, _ = st.Forward(x)
			}
			tg, _ := d.Target(m)
			losses[m], _, _ = mse{}.Loss(x, tg)
		}
		out = append(out, losses)
	}
	return out
}
