package e2e_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/generated/onef1btie"
	"github.com/ppgen/ppgen/generated/zbvtie"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// The tied model: S stages of nn layers (width tieWidth). Stage A and stage
// B each hold a copy of one Linear (weight and bias) declared tied with
// nn.Tie; in the sequential reference the two uses are literally one
// *nn.Linear, whose gradient is then the sum of both uses' by
// construction.
const (
	tieWidth = 6
	tieRows  = 3
)

// tieModel builds the stages for ties: with shared, every tie's two uses
// are one layer object (the reference); without, each stage gets its own
// copy, equal at the start, and the stages of a tie are nn.TiedStages.
func tieModel(t testing.TB, S int, ties []ir.Tie, dt tensor.Dtype, shared bool) (stages []*nn.Sequential, held []pipe.Stage) {
	t.Helper()
	rng := nn.NewRand(7)
	must := func(l *nn.Linear, err error) *nn.Linear {
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	tied := make([]*nn.Linear, S) // the tied layer each stage holds, or nil
	for n, tie := range ties {
		a := must(nn.NewLinear(tieWidth, tieWidth, dt, nn.NewRand(uint64(100+n))))
		b := a
		if !shared {
			b = must(nn.NewLinear(tieWidth, tieWidth, dt, nn.NewRand(uint64(100+n)))) // equal to a
		}
		tied[tie.A], tied[tie.B] = a, b
	}
	for s := range S {
		layers := []nn.Layer{must(nn.NewLinear(tieWidth, tieWidth, dt, rng)), nn.Tanh{}}
		if l := tied[s]; l != nil {
			layers = append(layers, l, nn.Tanh{})
		}
		seq := nn.NewSequential(layers...)
		stages = append(stages, seq)
		var st pipe.Stage = seq
		if l := tied[s]; l != nil && !shared {
			ts, err := nn.Tie(seq, l.Weight, l.Bias)
			if err != nil {
				t.Fatal(err)
			}
			st = ts
		}
		held = append(held, st)
	}
	return stages, held
}

// tieData is micro-batch m of iteration it: inputs and targets of
// [tieRows, tieWidth].
func tieData(dt tensor.Dtype, micro, it int) pipe.MicroBatches {
	var b pipe.MicroBatches
	for m := range micro {
		x := make([]float64, tieRows*tieWidth)
		y := make([]float64, tieRows*tieWidth)
		for i := range x {
			x[i] = math.Sin(float64(1 + i + 7*m + 31*it))
			y[i] = math.Cos(float64(2*i + m + it))
		}
		b.Inputs = append(b.Inputs, tieDense(dt, x))
		b.Targets = append(b.Targets, tieDense(dt, y))
	}
	return b
}

func tieDense(dt tensor.Dtype, v []float64) *tensor.Dense {
	if dt == tensor.Float32 {
		w := make([]float32, len(v))
		for i, x := range v {
			w[i] = float32(x)
		}
		return tensor.New(tensor.WithShape(tieRows, tieWidth), tensor.WithBacking(w))
	}
	return tensor.New(tensor.WithShape(tieRows, tieWidth), tensor.WithBacking(v))
}

// uniqueParams returns the parameters of stages, each once (a shared layer
// appears in two stages).
func uniqueParams(stages []*nn.Sequential) []*nn.Param {
	seen := map[*nn.Param]bool{}
	var out []*nn.Param
	for _, s := range stages {
		for _, p := range s.Params() {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// tieSequential trains the reference (shared layers) for iters iterations
// and returns the losses; with maxNorm > 0 it clips the gradients by their
// norm first (nn.ClipGradNorm on one process) and returns the norms too.
func tieSequential(t testing.TB, stages []*nn.Sequential, dt tensor.Dtype, micro, iters int, maxNorm float64) ([][]float64, []float64) {
	t.Helper()
	loss := nn.MSE{Scale: 1 / float64(micro)}
	opt := &nn.SGD{LR: 0.1}
	ps := uniqueParams(stages)
	var out [][]float64
	var norms []float64
	for it := range iters {
		d := tieData(dt, micro, it)
		ls := make([]float64, micro)
		for m := range micro {
			x := d.Inputs[m]
			saved := make([]any, len(stages))
			for s, st := range stages {
				var err error
				if x, saved[s], err = st.Forward(x); err != nil {
					t.Fatal(err)
				}
			}
			l, dy, err := loss.Loss(x, d.Targets[m])
			if err != nil {
				t.Fatal(err)
			}
			ls[m] = l
			for s := len(stages) - 1; s >= 0; s-- {
				if dy, err = stages[s].Backward(saved[s], dy); err != nil {
					t.Fatal(err)
				}
			}
		}
		if maxNorm > 0 {
			norm, err := nn.ClipGradNorm(nil, ps, ps, maxNorm)
			if err != nil {
				t.Fatal(err)
			}
			norms = append(norms, norm)
		}
		if err := opt.Step(ps); err != nil {
			t.Fatal(err)
		}
		nn.ZeroGrad(ps)
		out = append(out, ls)
	}
	return out, norms
}

// tieData source of the pipeline: the current iteration's micro-batches.
type tieSource struct {
	dt    tensor.Dtype
	micro int
	it    *int
}

func (s tieSource) Input(m int) (*tensor.Dense, error) {
	return tieData(s.dt, s.micro, *s.it).Input(m)
}

func (s tieSource) Target(m int) (*tensor.Dense, error) {
	return tieData(s.dt, s.micro, *s.it).Target(m)
}

// trainTied runs p (lowered with ties) on the tied model over trs and
// returns the losses and the stages. With maxNorm > 0 every rank clips by
// the global norm at OPT_STEP (a Comm over all ranks on the Grad channel;
// a tie counted on its stage A, nn.NormShare.Skip holding stage B's copy)
// and norms[r] holds rank r's norm of every iteration.
func trainTied(t *testing.T, p prog, trs []transport.Transport, dt tensor.Dtype, iters int, mode string, maxNorm float64) (losses [][]float64, stages []*nn.Sequential, norms [][]float64) {
	t.Helper()
	sp := p.spec
	var ties []ir.Tie
	for _, x := range sp.Ties {
		ties = append(ties, ir.Tie{A: x.A, B: x.B})
	}
	stages, held := tieModel(t, sp.Stages, ties, dt, false)
	norms = make([][]float64, sp.Ranks)
	it := 0
	src := tieSource{dt, sp.Micro, &it}
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
		opt := &nn.SGD{LR: 0.1}
		var share nn.NormShare
		for _, tie := range ties {
			if sp.RankOf[tie.B] == r {
				bp := stages[tie.B].Params()
				share.Skip = append(share.Skip, bp[len(bp)-2:]...) // the tied layer's weight and bias
			}
		}
		all, err := collective.New(trs[r], abi.GradChannel)
		if err != nil {
			t.Fatal(err)
		}
		x, err := pipe.New(pipe.Config{Rank: r, Spec: sp, Stages: mine, Transport: trs[r], Data: src,
			Loss: nn.MSE{Scale: 1 / float64(sp.Micro)},
			OptStep: func() error {
				if maxNorm > 0 {
					norm, err := nn.ClipGradNorm(all, share.Counted(ps), ps, maxNorm)
					if err != nil {
						return err
					}
					norms[r] = append(norms[r], norm)
				}
				if err := opt.Step(ps); err != nil {
					return err
				}
				nn.ZeroGrad(ps)
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		xs[r] = x
		t.Cleanup(func() { x.Close(); trs[r].Close() })
	}
	fns := rankFns(p, mode)
	last := sp.RankOf[sp.Stages-1]
	for it = range iters {
		if err := pipe.RunAll(xs, fns); err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		losses = append(losses, xs[last].Losses())
	}
	return losses, stages, norms
}

// tieCases are the programs with ties the tests lower: a tie across ranks
// (1f1b, interleaved), two ties, a tie on one rank (zbv and dualpipev put
// stages 0 and S-1 on rank 0), split backwards and batches.
var tieCases = []struct {
	cfg  ir.Config
	opt  passes.Options
	ties []ir.Tie
}{
	{ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8}, passes.Options{}, []ir.Tie{{A: 0, B: 3}}},
	{ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 4}, passes.Options{}, []ir.Tie{{A: 0, B: 3}, {A: 1, B: 2}}},
	{ir.Config{Schedule: "1f1b", Ranks: 2, Micro: 4}, passes.Options{Split: true, Batch: true}, []ir.Tie{{A: 0, B: 1}}},
	{ir.Config{Schedule: "interleaved", Ranks: 2, Virtual: 2, Micro: 4}, passes.Options{}, []ir.Tie{{A: 0, B: 3}}},
	{ir.Config{Schedule: "interleaved", Ranks: 4, Virtual: 2, Micro: 8}, passes.Options{}, []ir.Tie{{A: 0, B: 7}}},
	{ir.Config{Schedule: "zbv", Ranks: 4, Micro: 8}, passes.Options{}, []ir.Tie{{A: 0, B: 7}}},
	{ir.Config{Schedule: "zbv", Ranks: 2, Micro: 4}, passes.Options{}, []ir.Tie{{A: 0, B: 3}, {A: 1, B: 2}}},
	{ir.Config{Schedule: "zbv", Ranks: 4, Micro: 8}, passes.Options{Batch: true}, []ir.Tie{{A: 1, B: 7}}},
	{ir.Config{Schedule: "dualpipev", Ranks: 4, Micro: 8}, passes.Options{}, []ir.Tie{{A: 0, B: 7}}},
}

func tieProg(t *testing.T, c int) prog {
	tc := tieCases[c]
	opt := gen.Options{Passes: tc.opt}
	opt.Passes.Ties = tc.ties
	return lowered(t, tc.cfg, opt)
}

// TestTiedMatchesSequential trains every tie case in-process and requires
// the losses and both copies of every tied parameter (and every other
// parameter) to equal sequential training of the model in which each tie is
// one parameter: float64 within 1e-12, float32 within 1e-5 (relative).
func TestTiedMatchesSequential(t *testing.T) {
	for c, tc := range tieCases {
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			name := fmt.Sprintf("%s-P%d-V%d-M%d-%v-%s", tc.cfg.Schedule, tc.cfg.Ranks, tc.cfg.Virtual, tc.cfg.Micro, tc.ties, dt)
			t.Run(strings.ReplaceAll(name, " ", ","), func(t *testing.T) {
				p := tieProg(t, c)
				checkTied(t, p, inprocWorld(p.spec.Ranks, 20*time.Second), dt, "interp")
			})
		}
	}
}

// TestTiedOverTCP runs a cross-rank tie and a tie within one rank over TCP.
func TestTiedOverTCP(t *testing.T) {
	for _, c := range []int{0, 5} {
		p := tieProg(t, c)
		t.Run(p.name, func(t *testing.T) {
			checkTied(t, p, tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil), tensor.Float64, "interp")
		})
	}
}

func checkTied(t *testing.T, p prog, trs []transport.Transport, dt tensor.Dtype, mode string) {
	t.Helper()
	checkTiedClip(t, p, trs, dt, mode, 0)
}

// TestTiedClipMatchesSequential: clipping by the global norm across the
// pipeline's ranks, a tie counted once (across ranks, within one rank, two
// ties), gives every rank the sequential model's norm and trains as
// sequential training with clipping does.
func TestTiedClipMatchesSequential(t *testing.T) {
	for _, c := range []int{0, 1, 5} {
		p := tieProg(t, c)
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			t.Run(fmt.Sprintf("%s/%v", p.name, dt), func(t *testing.T) {
				checkTiedClip(t, p, inprocWorld(p.spec.Ranks, 20*time.Second), dt, "interp", 0.05)
			})
		}
	}
}

// checkTiedClip is checkTied, clipping by maxNorm when it is positive.
func checkTiedClip(t *testing.T, p prog, trs []transport.Transport, dt tensor.Dtype, mode string, maxNorm float64) {
	t.Helper()
	const iters = 3
	tol := 1e-12
	if dt == tensor.Float32 {
		tol = 1e-5
	}
	var ties []ir.Tie
	for _, x := range p.spec.Ties {
		ties = append(ties, ir.Tie{A: x.A, B: x.B})
	}
	if len(ties) == 0 {
		t.Fatal("the lowered program has no ties")
	}
	got, stages, norms := trainTied(t, p, trs, dt, iters, mode, maxNorm)
	ref, _ := tieModel(t, p.spec.Stages, ties, dt, true)
	want, wantNorms := tieSequential(t, ref, dt, p.spec.Micro, iters, maxNorm)
	if maxNorm > 0 {
		if slices.Max(wantNorms) <= maxNorm {
			t.Errorf("norms %v never above %v: the clipping was not tested", wantNorms, maxNorm)
		}
		for r := range norms {
			for it := range wantNorms {
				if relErr(norms[r][it], wantNorms[it]) > tol {
					t.Errorf("rank %d iteration %d: global norm %.17g, sequential %.17g", r, it, norms[r][it], wantNorms[it])
				}
			}
		}
	}
	worst := 0.0
	for it := range want {
		for m := range want[it] {
			worst = max(worst, relErr(got[it][m], want[it][m]))
		}
	}
	if worst > tol {
		t.Errorf("losses differ from sequential training by %.3g relative (tolerance %g):\n got %v\nwant %v", worst, tol, got, want)
	}
	// Every parameter of every stage, both copies of a tie against the one
	// reference parameter, each tensor's error relative to its largest
	// element (normErr): in float32 the two sums of a tied gradient
	// (per copy then together, or use by use) round apart by a few ulps,
	// and an element near zero (a bias) would make an elementwise relative
	// error of that meaningless.
	worst = 0.0
	for s := range stages {
		a, b := stages[s].Params(), ref[s].Params()
		if len(a) != len(b) {
			t.Fatalf("stage %d: %d parameters, the reference %d", s, len(a), len(b))
		}
		for i := range a {
			worst = max(worst, normErr(tieFloats(a[i].Value), tieFloats(b[i].Value)))
		}
	}
	if worst > tol {
		t.Errorf("parameters differ from sequential training by %.3g relative (tolerance %g)", worst, tol)
	}
	// The copies of a tie hold the same bits.
	for _, tie := range ties {
		a, b := stages[tie.A].Params(), stages[tie.B].Params()
		x, y := tieFloats(a[len(a)-2].Value), tieFloats(b[len(b)-2].Value)
		for k := range x {
			if x[k] != y[k] {
				t.Fatalf("tie %s: the copies' weights differ at %d: %v and %v", tie, k, x[k], y[k])
			}
		}
	}
}

// tiedCatalog are the generated packages with ties and their configs
// (their //go:generate lines).
func tiedCatalog() []prog {
	tie := func(a, b int) gen.Options { return gen.Options{Passes: passes.Options{Ties: []ir.Tie{{A: a, B: b}}}} }
	return []prog{
		{"onef1btie", ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8}, tie(0, 3), onef1btie.Spec, onef1btie.Ranks[:], onef1btie.Program},
		{"zbvtie", ir.Config{Schedule: "zbv", Ranks: 4, Micro: 8}, tie(0, 7), zbvtie.Spec, zbvtie.Ranks[:], zbvtie.Program},
	}
}

// TestTiedCatalog: each generated package with ties is what gen lowers
// now (Spec with its Ties, program as data), and its straight-line code
// and its table train as sequential training does.
func TestTiedCatalog(t *testing.T) {
	for _, c := range tiedCatalog() {
		t.Run(c.name, func(t *testing.T) {
			l := lowered(t, c.cfg, c.opt)
			if fmt.Sprint(l.spec) != fmt.Sprint(c.spec) {
				t.Errorf("spec:\n generated %+v\n lowered   %+v", c.spec, l.spec)
			}
			if !slices.EqualFunc(l.ops, c.ops, slices.Equal) {
				t.Errorf("the generated Program differs from lowering %+v", c.cfg)
			}
			for _, mode := range []string{"straight", "interp"} {
				checkTied(t, c, inprocWorld(c.spec.Ranks, 20*time.Second), tensor.Float64, mode)
			}
		})
	}
}

func relErr(a, b float64) float64 {
	d := math.Abs(a - b)
	if d == 0 {
		return 0
	}
	return d / math.Max(math.Max(math.Abs(a), math.Abs(b)), 1e-30)
}

// normErr is max |x-y| over max(|x|, |y|), over the elements of two
// equal-length tensors: their difference relative to their size.
func normErr(x, y []float64) float64 {
	d, m := 0.0, 0.0
	for k := range x {
		d = max(d, math.Abs(x[k]-y[k]))
		m = max(m, math.Abs(x[k]), math.Abs(y[k]))
	}
	if d == 0 {
		return 0
	}
	return d / math.Max(m, 1e-30)
}

func tieFloats(t *tensor.Dense) []float64 {
	if t.Dtype() == tensor.Float32 {
		var out []float64
		for _, v := range t.Float32s() {
			out = append(out, float64(v))
		}
		return out
	}
	return t.Float64s()
}

// TestTiedStageMustImplementTied: a stage of a tie that is not a pipe.Tied
// fails pipe.New, naming the stage and the fix.
func TestTiedStageMustImplementTied(t *testing.T) {
	p := tieProg(t, 0)
	stages, _ := tieModel(t, p.spec.Stages, []ir.Tie{{A: 0, B: 3}}, tensor.Float64, false)
	trs := inprocWorld(p.spec.Ranks, time.Second)
	defer func() {
		for _, tr := range trs {
			tr.Close()
		}
	}()
	_, err := pipe.New(pipe.Config{Rank: 0, Spec: p.spec, Stages: map[int]pipe.Stage{0: stages[0]}, Transport: trs[0],
		Data: tieSource{tensor.Float64, p.spec.Micro, new(int)}, Loss: nn.MSE{}})
	if err == nil || !strings.Contains(err.Error(), "stage 0") || !strings.Contains(err.Error(), "pipe.Tied") {
		t.Fatalf("pipe.New with an untied stage 0: %v; want an error naming stage 0 and pipe.Tied", err)
	}
}

// TestTiedShapeMismatch: copies of a tie whose lists differ (in order, or
// in count) fail the exchange on both ranks at once, naming both stages,
// rather than leaving one waiting for a tensor the other never sends.
func TestTiedShapeMismatch(t *testing.T) {
	p := tieProg(t, 0)
	sp := p.spec
	for name, list := range map[string]func(l *nn.Linear) []*nn.Param{
		"order": func(l *nn.Linear) []*nn.Param { return []*nn.Param{l.Bias, l.Weight} },
		"count": func(l *nn.Linear) []*nn.Param { return []*nn.Param{l.Weight} },
	} {
		t.Run(name, func(t *testing.T) {
			// A timeout well past the test's run: no rank may end in one.
			trs := inprocWorld(sp.Ranks, time.Minute)
			stages, held := tieModel(t, sp.Stages, []ir.Tie{{A: 0, B: 3}}, tensor.Float64, false)
			l := stages[3].Layers[2].(*nn.Linear)
			var err error
			if held[3], err = nn.Tie(stages[3], list(l)...); err != nil {
				t.Fatal(err)
			}
			xs := make([]*pipe.Exec, sp.Ranks)
			for r := range sp.Ranks {
				mine := map[int]pipe.Stage{}
				for s, rr := range sp.RankOf {
					if rr == r {
						mine[s] = held[s]
					}
				}
				x, err := pipe.New(pipe.Config{Rank: r, Spec: sp, Stages: mine, Transport: trs[r], Loss: nn.MSE{Scale: 1},
					Data: tieSource{tensor.Float64, sp.Micro, new(int)}})
				if err != nil {
					t.Fatal(err)
				}
				xs[r] = x
				defer func() { x.Close(); trs[r].Close() }()
			}
			err = pipe.RunAll(xs, rankFns(p, "interp"))
			for _, r := range []int{0, 3} {
				var se *pipe.StepError
				rerr := xs[r].Err()
				if !errors.As(rerr, &se) || !strings.Contains(rerr.Error(), "TIE_GRAD") || !strings.Contains(rerr.Error(), "stage 0's tied gradients") || !strings.Contains(rerr.Error(), "stage 3's") {
					t.Errorf("rank %d: %v; want a TIE_GRAD error naming both stages' lists (all: %v)", r, rerr, err)
				}
			}
			for r, x := range xs {
				if errors.Is(x.Err(), transport.ErrTimeout) {
					t.Errorf("rank %d: %v; want the mismatch to fail at the exchange, not at a timeout", r, x.Err())
				}
			}
		})
	}
}
