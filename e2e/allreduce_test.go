package e2e_test

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// clipMax is the gradient norm the tests clip to: small enough that every
// iteration clips.
const clipMax = 0.05

// clipCases are -clip programs: one pipeline with a tie across ranks, interleaved stages with
// batches, and the V of zbv (stages 0 and S-1 on rank 0) with split
// backwards and a tie.
var clipCases = []struct {
	cfg  ir.Config
	opt  passes.Options
	ties []ir.Tie
}{
	{ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8}, passes.Options{}, []ir.Tie{{A: 0, B: 3}}},
	{ir.Config{Schedule: "interleaved", Ranks: 2, Virtual: 2, Micro: 4}, passes.Options{Batch: true}, nil},
	{ir.Config{Schedule: "zbv", Ranks: 2, Micro: 4}, passes.Options{}, []ir.Tie{{A: 1, B: 2}}},
}

// sumSquares returns the sum of the squares of ps' gradients.
func sumSquares(ps []*nn.Param) float64 {
	s := 0.0
	for _, p := range ps {
		for _, v := range p.Grad.Data().([]float64) {
			s += v * v
		}
	}
	return s
}

// clipStep scales ps' gradients by min(1, clipMax/norm), then steps opt and
// zeroes them: the test's clipping (runtime/nn has the real one).
func clipStep(opt *nn.SGD, ps []*nn.Param, norm float64) error {
	if f := clipMax / norm; f < 1 {
		for _, p := range ps {
			g := p.Grad.Data().([]float64)
			for i := range g {
				g[i] *= f
			}
		}
	}
	if err := opt.Step(ps); err != nil {
		return err
	}
	nn.ZeroGrad(ps)
	return nil
}

// TestAllReduceMatchesSequential trains each -clip program in-process: at
// its ALL_REDUCE every rank's pipe.Config.AllReduce sums the squares of its
// gradients over the world through runtime/collective, and OptStep clips
// by the global norm. Each rank's reductions are called once per
// iteration, numbered 0, after its last backward and before its OptStep,
// and the losses and parameters equal sequential training with the same
// clipping (float64, within 1e-12).
func TestAllReduceMatchesSequential(t *testing.T) {
	for c, tc := range clipCases {
		t.Run(fmt.Sprintf("%s-P%d-V%d-M%d", tc.cfg.Schedule, tc.cfg.Ranks, tc.cfg.Virtual, tc.cfg.Micro), func(t *testing.T) {
			opt := gen.Options{Passes: tc.opt}
			opt.Passes.ClipNorm, opt.Passes.Ties = true, tc.ties
			p := lowered(t, tc.cfg, opt)
			for r, ops := range p.ops {
				n := 0
				for _, o := range ops {
					if o.Kind == pipe.OpAllReduce {
						n++
					}
				}
				if n != 1 {
					t.Fatalf("rank %d's program holds %d ALL_REDUCE; -clip places one", r, n)
				}
			}
			checkClipped(t, p, clipCases[c].ties, inprocWorld(p.spec.Ranks, 20*time.Second))
		})
	}
}

func checkClipped(t *testing.T, p prog, ties []ir.Tie, trs []transport.Transport) {
	t.Helper()
	const iters = 3
	sp := p.spec
	stages, held := tieModel(t, sp.Stages, ties, tensor.Float64, false)
	it := 0
	src := tieSource{tensor.Float64, sp.Micro, &it}
	var mu sync.Mutex
	calls := make([][]string, sp.Ranks) // per rank: "reduce n" and "opt", in order
	note := func(r int, s string) {
		mu.Lock()
		calls[r] = append(calls[r], s)
		mu.Unlock()
	}
	xs := make([]*pipe.Exec, sp.Ranks)
	for r := range sp.Ranks {
		mine := map[int]pipe.Stage{}
		var own []*nn.Sequential
		for s, rr := range sp.RankOf {
			if rr == r {
				mine[s] = held[s]
				own = append(own, stages[s])
			}
		}
		ps := uniqueParams(own)
		// A tie's second copy holds the summed gradient too: count it once.
		counted := ps
		for _, tie := range ties {
			if sp.RankOf[tie.B] == r {
				b := stages[tie.B].Params()
				counted = slices.DeleteFunc(slices.Clone(counted), func(q *nn.Param) bool { return q == b[len(b)-2] || q == b[len(b)-1] })
			}
		}
		comm, err := collective.New(trs[r], abi.DataChannel)
		if err != nil {
			t.Fatal(err)
		}
		sgd := &nn.SGD{LR: 0.1}
		norm := math.NaN()
		x, err := pipe.New(pipe.Config{Rank: r, Spec: sp, Stages: mine, Transport: trs[r], Data: src,
			Loss: nn.MSE{Scale: 1 / float64(sp.Micro)},
			AllReduce: func(n int) error {
				note(r, fmt.Sprintf("reduce %d", n))
				sq := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{sumSquares(counted)}))
				if err := comm.AllReduce(sq); err != nil {
					return err
				}
				norm = math.Sqrt(sq.Data().([]float64)[0])
				return nil
			},
			OptStep: func() error {
				note(r, "opt")
				if math.IsNaN(norm) {
					return fmt.Errorf("rank %d: OPT_STEP before the ALL_REDUCE of the norm", r)
				}
				err := clipStep(sgd, ps, norm)
				norm = math.NaN()
				return err
			}})
		if err != nil {
			t.Fatal(err)
		}
		xs[r] = x
		t.Cleanup(func() { x.Close(); trs[r].Close() })
	}
	fns := rankFns(p, "interp")
	last := sp.RankOf[sp.Stages-1]
	var got [][]float64
	for it = range iters {
		if err := pipe.RunAll(xs, fns); err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		got = append(got, xs[last].Losses())
	}
	for r, cs := range calls {
		want := slices.Repeat([]string{"reduce 0", "opt"}, iters)
		if !slices.Equal(cs, want) {
			t.Errorf("rank %d: hooks called %v; want %v", r, cs, want)
		}
	}

	// The reference: one model (a tie's two uses one layer), the norm over
	// every parameter once, the same clipping.
	ref, _ := tieModel(t, sp.Stages, ties, tensor.Float64, true)
	all := uniqueParams(ref)
	sgd := &nn.SGD{LR: 0.1}
	loss := nn.MSE{Scale: 1 / float64(sp.Micro)}
	clipped := 0
	for it := range iters {
		d := tieData(tensor.Float64, sp.Micro, it)
		for m := range sp.Micro {
			x := d.Inputs[m]
			saved := make([]any, len(ref))
			for s, st := range ref {
				var err error
				if x, saved[s], err = st.Forward(x); err != nil {
					t.Fatal(err)
				}
			}
			l, dy, err := loss.Loss(x, d.Targets[m])
			if err != nil {
				t.Fatal(err)
			}
			if relErr(got[it][m], l) > 1e-12 {
				t.Errorf("iteration %d micro %d: loss %v, sequential %v", it, m, got[it][m], l)
			}
			for s := len(ref) - 1; s >= 0; s-- {
				if dy, err = ref[s].Backward(saved[s], dy); err != nil {
					t.Fatal(err)
				}
			}
		}
		norm := math.Sqrt(sumSquares(all))
		if norm > clipMax {
			clipped++
		}
		if err := clipStep(sgd, all, norm); err != nil {
			t.Fatal(err)
		}
	}
	if clipped == 0 {
		t.Errorf("no iteration clipped (norms below %g): the test checks nothing", clipMax)
	}
	worst := 0.0
	for s := range stages {
		a, b := stages[s].Params(), ref[s].Params()
		for i := range a {
			worst = max(worst, normErr(tieFloats(a[i].Value), tieFloats(b[i].Value)))
		}
	}
	if worst > 1e-12 {
		t.Errorf("parameters differ from sequential training with clipping by %.3g relative", worst)
	}
}

// TestAllReduceOverTCP runs the first -clip case over TCP: the reduction
// goes through runtime/collective on the ranks' TCP endpoints.
func TestAllReduceOverTCP(t *testing.T) {
	tc := clipCases[0]
	opt := gen.Options{Passes: tc.opt}
	opt.Passes.ClipNorm, opt.Passes.Ties = true, tc.ties
	p := lowered(t, tc.cfg, opt)
	checkClipped(t, p, tc.ties, tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil))
}
