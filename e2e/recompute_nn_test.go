package e2e_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/verify"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// TestRecomputeNNMatchesNone trains runtime/nn stages (e2eStages: Linear,
// Tanh, Linear, Tanh, and a Linear on the last stage; nn.Sequential is a
// pipe.Recomputable) with programs lowered with -recompute none, full,
// selective and model policies (markedModel's marked layers, anywhere in
// a stage), for several families, in process through
// Interpret, and checks that
//   - every policy's losses and parameters equal the same family's without
//     recompute bit for bit (float64), and sequential training within
//     1e-12;
//   - a selective stage rebuilds only its share of layers: its Forward
//     runs once per chunk (Rebuild re-runs the first layers, or the marked
//     ones, not Forward);
//   - each rank's peak of held saved contexts, with and without recompute, measured by the Exec as the
//     steps ran (Exec.PeakLive), equals gen/verify's Report.PeakLive of the
//     program, in chunks, a selective chunk counting the share it keeps.
func TestRecomputeNNMatchesNone(t *testing.T) {
	for _, tc := range []struct {
		cfg      ir.Config
		policies []string
	}{
		{ir.Config{Schedule: "1f1b", Ranks: 3, Micro: 6}, []string{"full", "selective:0.5", "selective:0=0.25,2=0.75", "selective:0.5@idle", "model", "model@idle", "selective:0=model,1=0.5,2=model"}},
		{ir.Config{Schedule: "gpipe", Ranks: 2, Micro: 4}, []string{"selective:0.5"}},
		{ir.Config{Schedule: "interleaved", Ranks: 2, Virtual: 2, Micro: 4}, []string{"full", "selective:0.75", "model"}},
		{ir.Config{Schedule: "zbv", Ranks: 2, Micro: 4}, []string{"selective:0.5", "full:0"}},
		{ir.Config{Schedule: "interleaved-zb", Ranks: 2, Virtual: 2, Micro: 4}, []string{"selective:0.25"}},
	} {
		t.Run(fmt.Sprintf("%s-P%d", tc.cfg.Schedule, tc.cfg.Ranks), func(t *testing.T) {
			base := lowered(t, tc.cfg, gen.Options{})
			ref := e2eStages(t, base.spec.Stages)
			refLosses := trainReference(t, ref, base.spec.Micro)
			var nonePeaks []float64
			noneLosses, noneParams := trainNN(t, base, &nonePeaks, nil)
			noneRes, err := gen.Lower(tc.cfg, gen.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if rep, err := verify.Check(noneRes.Program, verify.Options{}); err != nil || !slices.Equal(nonePeaks, rep.PeakLive) {
				t.Errorf("without recompute: measured peaks %v; the verifier's %v (%v)", nonePeaks, rep.PeakLive, err)
			}
			for m, l := range noneLosses[0] {
				if d := relDiff(l, refLosses[0][m]); d > 1e-12 {
					t.Fatalf("without recompute: micro %d loss %v, sequential %v", m, l, refLosses[0][m])
				}
			}
			for _, policy := range tc.policies {
				opt := gen.Options{Passes: passes.Options{Set: map[string]string{"recompute": policy}}}
				if strings.Contains(policy, "model") {
					opt.Passes.Marked = markedModel(t, tc.cfg.Ranks*max(tc.cfg.Virtual, 1)).EvenMarks
				}
				p := lowered(t, tc.cfg, opt)
				res, err := gen.Lower(tc.cfg, opt)
				if err != nil {
					t.Fatal(err)
				}
				rep, err := verify.Check(res.Program, verify.Options{})
				if err != nil {
					t.Fatal(err)
				}
				var peaks []float64
				losses, ps := trainNN(t, p, &peaks, nil)
				for step := range losses {
					if !slices.Equal(losses[step], noneLosses[step]) {
						t.Errorf("-recompute %s step %d: losses %v; without recompute %v", policy, step, losses[step], noneLosses[step])
					}
				}
				for i := range ps {
					if !slices.Equal(ps[i], noneParams[i]) {
						t.Errorf("-recompute %s: parameter %d differs from training without recompute", policy, i)
						break
					}
				}
				if !slices.Equal(peaks, rep.PeakLive) {
					t.Errorf("-recompute %s: measured peaks %v; the verifier's %v", policy, peaks, rep.PeakLive)
				}
				t.Logf("-recompute %s: peaks %v (verifier %v)", policy, peaks, rep.PeakLive)
			}
		})
	}
}

// fwdCounter counts a Sequential's Forward calls; it forwards Drop and
// Rebuild, so that it is a pipe.Recomputable as the Sequential is.
type fwdCounter struct {
	*nn.Sequential
	calls int
}

func (c *fwdCounter) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	c.calls++
	return c.Sequential.Forward(x)
}

// trainNN trains e2eStages with p's program for e2eSteps steps and
// returns the losses of every step and the parameters after; with peaks
// it stores each rank's Exec.PeakLive there; with tl the Execs record
// their calls there (pipe.Config.Timeline). A stage of p that recomputes
// selectively must run Forward once per chunk.
func trainNN(t *testing.T, p prog, peaks *[]float64, tl *pipe.Timeline) ([][]float64, [][]float64) {
	t.Helper()
	sp := p.spec
	model := e2eStages(t, sp.Stages)
	counters := make([]*fwdCounter, sp.Stages)
	data := &e2eData{}
	trs := transport.NewInProc(sp.Ranks)
	xs := make([]*pipe.Exec, sp.Ranks)
	for r := range xs {
		stages := map[int]pipe.Stage{}
		var mine []*nn.Sequential
		for s := range sp.Stages {
			if sp.RankOf[s] == r {
				counters[s] = &fwdCounter{Sequential: model[s]}
				stages[s] = counters[s]
				mine = append(mine, model[s])
			}
		}
		ps := params(mine)
		opt := &nn.SGD{LR: e2eLR}
		x, err := pipe.New(pipe.Config{
			Rank: r, Spec: sp, Stages: stages, Transport: trs[r],
			Loss: nn.MSE{Scale: 1 / float64(sp.Micro)}, Data: data, Timeline: tl,
			OptStep: func() error {
				if err := opt.Step(ps); err != nil {
					return err
				}
				nn.ZeroGrad(ps)
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		xs[r] = x
		defer trs[r].Close()
		defer x.Close()
	}
	var losses [][]float64
	for step := range e2eSteps {
		data.set(step, sp.Micro)
		if err := pipe.RunAll(xs, rankFns(p, "interp")); err != nil {
			t.Fatalf("%s step %d: %v", p.name, step, err)
		}
		losses = append(losses, slices.Clone(xs[sp.RankOf[sp.Stages-1]].Losses()))
	}
	for s, c := range counters {
		want := e2eSteps * sp.Micro
		named := s < len(sp.RecomputeLayers) && sp.RecomputeLayers[s] != nil
		if slices.Contains(sp.Recompute, s) && !named && (s >= len(sp.RecomputeShare) || sp.RecomputeShare[s] == 0 || sp.RecomputeShare[s] == 1) {
			want *= 2 // full recompute re-runs Forward
		}
		if c.calls != want {
			t.Errorf("%s: stage %d ran Forward %d times; want %d", p.name, s, c.calls, want)
		}
	}
	if peaks != nil {
		for _, x := range xs {
			*peaks = append(*peaks, x.PeakLive())
		}
	}
	var ps [][]float64
	for _, q := range params(model) {
		ps = append(ps, slices.Clone(q.Value.Float64s()))
	}
	return losses, ps
}

// markedModel is a model description of e2eStages' layers for stages
// stages, four a stage (the last stage's extra Linear left out: it is not
// marked), each Linear holding act 1 and each Tanh act 3, that marks for
// -recompute model layers anywhere in a stage: the two Tanhs of stage 0
// (layers 1 and 3, two runs: share (3+3)/8 = 0.75 by act, 0.5 by count),
// every layer of stage 1 (full) and the second Linear of stage 2 (layer 2,
// between Tanhs: share 1/8), and none of the others.
func markedModel(t *testing.T, stages int) model.Model {
	t.Helper()
	marked := [][]int{{1, 3}, {0, 1, 2, 3}, {2}}
	var layers []string
	for s := range stages {
		for l := range 4 {
			mark := ""
			if s < len(marked) && slices.Contains(marked[s], l) {
				mark = `, "recompute": true`
			}
			layers = append(layers, fmt.Sprintf(`{"name": "s%dl%d", "F": 1, "B": 2, "act": %d, "params": 1%s}`, s, l, 1+2*(l%2), mark))
		}
	}
	m, err := model.Read(strings.NewReader(`{"layers": [` + strings.Join(layers, ", ") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRecomputeTrainPeaks: the peaks of live chunks runtime/train's
// TestRecomputeWrapped expects each rank to measure (its onef1bPeaks: 1f1b
// at P = 4 holds P − r chunks on rank r, (P − r + 1)/2 under
// selective:0.5) are those gen/verify proves of the programs it trains,
// with and without FSDP steps (testprog's Selective, FSDP and
// FSDPSelective: M = 8, and M = 4 with -fsdp 1).
func TestRecomputeTrainPeaks(t *testing.T) {
	for _, tc := range []struct {
		micro, fsdp int
		policy      string
		want        []float64
	}{
		{8, 0, "selective:0.5", []float64{2.5, 2, 1.5, 1}},
		{4, 1, "selective:0.5", []float64{2.5, 2, 1.5, 1}},
		{4, 1, "none", []float64{4, 3, 2, 1}},
	} {
		opt := gen.Options{Passes: passes.Options{FSDP: tc.fsdp, Set: map[string]string{"recompute": tc.policy}}}
		res, err := gen.Lower(ir.Config{Schedule: "1f1b", Ranks: 4, Micro: tc.micro}, opt)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := verify.Check(res.Program, verify.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.PeakLive, tc.want) {
			t.Errorf("1f1b P=4 M=%d -fsdp %d -recompute %s: the verifier's peaks %v; want %v", tc.micro, tc.fsdp, tc.policy, rep.PeakLive, tc.want)
		}
	}
}

// TestOverlapPeaksMatchVerifier: in programs with overlap steps, whose
// halves run on two goroutines (OVERLAP_F_B of dualpipev, OVERLAP_B_F of
// -overlap), each rank's measured peak of held saved contexts is
// gen/verify's Report.PeakLive on every run: the Exec counts what an
// overlap's F saves before what its backward releases, whichever half
// finished first (the race detector once caught the two halves updating
// the count at once).
func TestOverlapPeaksMatchVerifier(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ir.Config
		opt  gen.Options
	}{
		{"dualpipev", ir.Config{Schedule: "dualpipev", Ranks: 2, Micro: 4}, gen.Options{}},
		{"interleaved-overlap", ir.Config{Schedule: "interleaved", Ranks: 2, Virtual: 2, Micro: 4}, gen.Options{Passes: passes.Options{Overlap: true}}},
		{"dualpipev-selective", ir.Config{Schedule: "dualpipev", Ranks: 2, Micro: 4}, gen.Options{Passes: passes.Options{Set: map[string]string{"recompute": "selective:0.5"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := lowered(t, tc.cfg, tc.opt)
			res, err := gen.Lower(tc.cfg, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := verify.Check(res.Program, verify.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for run := range 5 {
				var peaks []float64
				trainNN(t, p, &peaks, nil)
				if !slices.Equal(peaks, rep.PeakLive) {
					t.Fatalf("run %d: measured peaks %v; the verifier's %v", run, peaks, rep.PeakLive)
				}
			}
		})
	}
}
