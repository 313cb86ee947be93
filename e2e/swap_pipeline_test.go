package e2e_test

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/verify"
	"github.com/ppgen/ppgen/generated/fsdpswap"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/swap"
	"github.com/ppgen/ppgen/runtime/transport"
)

// The model of the end-to-end test: per stage two blocks (Linear, Tanh) and,
// on the last stage, a Linear to the output width.
const (
	e2eIn, e2eHidden, e2eOut = 6, 16, 3
	e2eRows                  = 4 // rows per micro-batch
	e2eSteps                 = 3
	e2eLR                    = 0.05
	e2eSeed                  = 11
)

func e2eStages(t *testing.T, numStages int) []*nn.Sequential {
	t.Helper()
	rng := nn.NewRand(e2eSeed)
	out := make([]*nn.Sequential, numStages)
	for s := range out {
		var ls []nn.Layer
		for b := range 2 {
			in := e2eHidden
			if s == 0 && b == 0 {
				in = e2eIn
			}
			l, err := nn.NewLinear(in, e2eHidden, tensor.Float64, rng)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l, nn.Tanh{})
		}
		if s == numStages-1 {
			l, err := nn.NewLinear(e2eHidden, e2eOut, tensor.Float64, rng)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		out[s] = nn.NewSequential(ls...)
	}
	return out
}

// e2eData is the data set: the micro-batches of one training step, made
// from the step number.
type e2eData struct{ in, target []*tensor.Dense }

func (d *e2eData) set(step, micro int) {
	rng := nn.NewRand(uint64(1000 + step))
	d.in, d.target = make([]*tensor.Dense, micro), make([]*tensor.Dense, micro)
	for m := range micro {
		x := make([]float64, e2eRows*e2eIn)
		for i := range x {
			x[i] = 2*rng.Float64() - 1
		}
		y := make([]float64, e2eRows*e2eOut)
		for r := range e2eRows {
			for o := range e2eOut {
				y[r*e2eOut+o] = math.Sin(x[r*e2eIn+o] + x[r*e2eIn+o+1])
			}
		}
		d.in[m] = tensor.New(tensor.WithShape(e2eRows, e2eIn), tensor.WithBacking(x))
		d.target[m] = tensor.New(tensor.WithShape(e2eRows, e2eOut), tensor.WithBacking(y))
	}
}

func (d *e2eData) Input(m int) (*tensor.Dense, error)  { return d.in[m], nil }
func (d *e2eData) Target(m int) (*tensor.Dense, error) { return d.target[m], nil }

func params(ss []*nn.Sequential) []*nn.Param {
	var ps []*nn.Param
	for _, s := range ss {
		ps = append(ps, s.Params()...)
	}
	return ps
}

// trainReference trains the model without a pipeline: per micro-batch the
// forward through every stage, the loss (scaled by 1/M) and the backward,
// then one SGD step. It returns the loss of every (step, micro).
func trainReference(t *testing.T, stages []*nn.Sequential, micro int) [][]float64 {
	ps := params(stages)
	opt := &nn.SGD{LR: e2eLR}
	loss := nn.MSE{Scale: 1 / float64(micro)}
	var data e2eData
	var losses [][]float64
	for step := range e2eSteps {
		data.set(step, micro)
		ls := make([]float64, micro)
		for m := range micro {
			x := data.in[m]
			saved := make([]any, len(stages))
			var err error
			for s, st := range stages {
				if x, saved[s], err = st.Forward(x); err != nil {
					t.Fatal(err)
				}
			}
			l, dy, err := loss.Loss(x, data.target[m])
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
		if err := opt.Step(ps); err != nil {
			t.Fatal(err)
		}
		nn.ZeroGrad(ps)
		losses = append(losses, ls)
	}
	return losses
}

// loweredProgram reads fsdpswap's Program table back into the lowered
// ir.Program and checks that it hashes to the generated Fingerprint, so it
// is exactly the program the generated rank functions run.
func loweredProgram(t *testing.T) ir.Program {
	t.Helper()
	sp := fsdpswap.Spec
	pl, err := ir.Table(sp.Ranks, sp.RankOf)
	if err != nil {
		t.Fatal(err)
	}
	p := ir.NewProgram(pl, sp.Micro)
	for r, row := range fsdpswap.Program {
		for _, op := range row {
			k := op.Kind // pipe.OpKind and ir.Kind are one type, abi.Kind
			if !k.Valid() || k.IsOverlap() {
				t.Fatalf("rank %d: op %v: kind %v not handled", r, op, op.Kind)
			}
			p.Ranks[r] = append(p.Ranks[r], ir.Step{Kind: k, Stage: int(op.Stage), Micro: int(op.Micro), Peer: int(op.Peer), Slot: int(op.Slot)})
		}
	}
	if fp := emit.Fingerprint(p); fp != sp.Fingerprint {
		t.Fatalf("the Program table hashes to %s, the generated Fingerprint is %s", fp, sp.Fingerprint)
	}
	return p
}

// TestSwapPipelineFSDPSwap trains with the committed schedule
// generated/fsdpswap (1f1b, P=4, M=8, -fsdp 1 -swap 2) on Swapping stages,
// one tier per rank, and checks that
//   - the losses and parameters equal sequential training (float64,
//     relative error ≤ 1e-12),
//   - every SWAP_LAUNCH_OFFLOAD of the program really offloaded a chunk,
//   - the measured peak of resident chunks per rank is at most the peak of
//     live chunks that gen/verify proves for the lowered program, and the
//     peak of resident bytes at most that many of the largest chunk.
func TestSwapPipelineFSDPSwap(t *testing.T) {
	p := loweredProgram(t)
	rep, err := verify.Check(p, verify.Options{})
	if err != nil {
		t.Fatalf("the verifier rejects the lowered program: %v", err)
	}
	sp := fsdpswap.Spec
	launches := make([]int64, sp.Ranks) // SWAP_LAUNCH_OFFLOAD steps per rank and iteration
	for r, row := range fsdpswap.Program {
		for _, op := range row {
			if op.Kind == pipe.OpSwapLaunchOffload {
				launches[r]++
			}
		}
	}
	ref := e2eStages(t, sp.Stages)
	refLosses := trainReference(t, ref, sp.Micro)

	for _, kind := range []string{"host", "file"} {
		t.Run(kind, func(t *testing.T) {
			model := e2eStages(t, sp.Stages)
			tiers := make([]*swap.Tier, sp.Ranks)
			for r := range tiers {
				if kind == "host" {
					tiers[r] = swap.NewHost()
				} else if tiers[r], err = swap.NewFile(t.TempDir()); err != nil {
					t.Fatal(err)
				}
			}
			data := &e2eData{}
			trs := transport.NewInProc(sp.Ranks)
			xs := make([]*pipe.Exec, sp.Ranks)
			for r := range xs {
				stages := map[int]pipe.Stage{}
				var mine []*nn.Sequential
				for _, s := range sp.StagesOf(r) {
					w := nn.WithSwap(model[s], tiers[r])
					w.Name = fmt.Sprintf("stage %d", s)
					stages[s] = w
					mine = append(mine, model[s])
				}
				ps := params(mine)
				opt := &nn.SGD{LR: e2eLR}
				x, err := pipe.New(pipe.Config{
					Rank: r, Spec: sp, Stages: stages, Transport: trs[r],
					Loss: nn.MSE{Scale: 1 / float64(sp.Micro)}, Data: data,
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
			lossDiff := 0.0
			for step := range e2eSteps {
				data.set(step, sp.Micro)
				if err := pipe.RunAll(xs, fsdpswap.Ranks[:]); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				got := xs[sp.RankOf[sp.Stages-1]].Losses()
				for m, l := range got {
					lossDiff = math.Max(lossDiff, relDiff(l, refLosses[step][m]))
				}
				for r, tr := range tiers {
					if st := tr.Stats(); st.ResidentBytes != 0 || st.ResidentChunks != 0 || st.OffloadedBytes != 0 || st.Pending != 0 {
						t.Errorf("step %d rank %d: chunks left after the iteration: %+v", step, r, st)
					}
				}
			}
			paramDiff := 0.0
			for i, p := range params(model) {
				a, b := p.Value.Float64s(), params(ref)[i].Value.Float64s()
				for j := range a {
					paramDiff = math.Max(paramDiff, relDiff(a[j], b[j]))
				}
			}
			t.Logf("max relative difference vs sequential training: loss %.3g, parameters %.3g", lossDiff, paramDiff)
			if lossDiff > 1e-12 || paramDiff > 1e-12 {
				t.Errorf("swapped pipeline training differs from sequential training: loss %.3g, parameters %.3g", lossDiff, paramDiff)
			}
			var offloads int64
			for r, tr := range tiers {
				st := tr.Stats()
				offloads += st.Offloads
				t.Logf("rank %d: verifier peak %d chunks; measured peak %d chunks, %d bytes (chunk ≤ %d bytes); %d offloads, %d loads, %d bytes out",
					r, rep.PeakActivations[r], st.PeakResidentChunks, st.PeakResidentBytes, st.MaxChunkBytes, st.Offloads, st.Loads, st.BytesOut)
				if want := launches[r] * e2eSteps; st.Offloads != want || st.Loads != want || st.Failures != 0 {
					t.Errorf("rank %d: %d offloads, %d loads, %d failures; want %d of each and no failure", r, st.Offloads, st.Loads, st.Failures, want)
				}
				peak := int64(rep.PeakActivations[r])
				if st.PeakResidentChunks > peak {
					t.Errorf("rank %d: measured peak of %d resident chunks exceeds the verifier's %d", r, st.PeakResidentChunks, peak)
				}
				if st.PeakResidentBytes > peak*st.MaxChunkBytes {
					t.Errorf("rank %d: measured peak of %d resident bytes exceeds the verifier's %d chunks × %d bytes", r, st.PeakResidentBytes, peak, st.MaxChunkBytes)
				}
				if err := tr.Close(); err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			if offloads == 0 {
				t.Error("no chunk was offloaded")
			}
		})
	}
}

func relDiff(a, b float64) float64 {
	d := math.Abs(a - b)
	if d == 0 {
		return 0
	}
	if math.IsNaN(d) {
		return math.Inf(1)
	}
	return d / math.Max(math.Max(math.Abs(a), math.Abs(b)), 1e-300)
}

// TestSwapPipelineCopyError: when a rank's file tier loses its directory,
// the background copy fails and the run stops with an error naming the
// step, the tier, the chunk and the byte count, rather than hanging.
func TestSwapPipelineCopyError(t *testing.T) {
	sp := fsdpswap.Spec
	model := e2eStages(t, sp.Stages)
	tier, err := swap.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	if err := os.RemoveAll(tier.Dir()); err != nil {
		t.Fatal(err)
	}
	data := &e2eData{}
	data.set(0, sp.Micro)
	trs := transport.NewInProc(sp.Ranks)
	xs := make([]*pipe.Exec, sp.Ranks)
	for r := range xs {
		stages := map[int]pipe.Stage{}
		for _, s := range sp.StagesOf(r) {
			if r == 0 {
				w := nn.WithSwap(model[s], tier)
				w.Name = fmt.Sprintf("stage %d", s)
				stages[s] = w
			} else {
				stages[s] = model[s]
			}
		}
		x, err := pipe.New(pipe.Config{Rank: r, Spec: sp, Stages: stages, Transport: trs[r], Loss: nn.MSE{}, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		xs[r] = x
		defer trs[r].Close()
		defer x.Close()
	}
	err = pipe.RunAll(xs, fsdpswap.Ranks[:])
	for _, want := range []string{"rank 0 step 0SWAP_WAIT_OFFLOAD0", "file tier under", "stage 0 forward #1", "bytes", tier.Dir()} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("run error %v: want it to mention %q", err, want)
		}
	}
}
