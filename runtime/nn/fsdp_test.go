package nn

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/transport"
)

// dpModel builds a 2-stage MLP (7 → 5 → 3, then 3 → 2): 40 + 18 = 58 and 8
// parameters, so shards over 3 members are padded.
func dpModel(t *testing.T, dt tensor.Dtype) []*Sequential {
	t.Helper()
	rng := NewRand(5)
	l1, err := NewLinear(7, 5, dt, rng)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := NewLinear(5, 3, dt, rng)
	l3, _ := NewLinear(3, 2, dt, rng)
	return []*Sequential{NewSequential(l1, Tanh{}, l2), NewSequential(Tanh{}, l3)}
}

type dpData struct{ in, target []*tensor.Dense }

func newDPData(dt tensor.Dtype, micro, step int) dpData {
	rng := NewRand(uint64(100 + step))
	var d dpData
	for range micro {
		d.in = append(d.in, randMatrix(dt, 3, 7, rng))
		d.target = append(d.target, randMatrix(dt, 3, 2, rng))
	}
	return d
}

// trainMicro runs forward and backward of the given micro-batches through
// stages (each a Stage with Backward) and returns the losses.
func trainMicro(stages []interface {
	Forward(*tensor.Dense) (*tensor.Dense, any, error)
	Backward(any, *tensor.Dense) (*tensor.Dense, error)
}, d dpData, micros []int, scale float64) error {
	loss := MSE{Scale: scale}
	for _, m := range micros {
		x := d.in[m]
		saved := make([]any, len(stages))
		for s, st := range stages {
			var err error
			if x, saved[s], err = st.Forward(x); err != nil {
				return err
			}
		}
		_, dy, err := loss.Loss(x, d.target[m])
		if err != nil {
			return err
		}
		for s := len(stages) - 1; s >= 0; s-- {
			if dy, err = stages[s].Backward(saved[s], dy); err != nil {
				return err
			}
		}
	}
	return nil
}

type backwarder = interface {
	Forward(*tensor.Dense) (*tensor.Dense, any, error)
	Backward(any, *tensor.Dense) (*tensor.Dense, error)
}

func flatOf(t *testing.T, ps []*Param) []float64 {
	var out []float64
	for _, p := range ps {
		switch p.Value.Dtype() {
		case tensor.Float32:
			for _, v := range p.Value.Float32s() {
				out = append(out, float64(v))
			}
		default:
			out = append(out, p.Value.Float64s()...)
		}
	}
	return out
}

func relErr(a, b float64) float64 {
	d := math.Abs(a - b)
	if d == 0 {
		return 0
	}
	return d / math.Max(math.Max(math.Abs(a), math.Abs(b)), 1e-30)
}

// TestFSDPEqualsSequential trains the model sharded over n members (FSDP)
// and replicated (DataParallel), each member on its block of the global
// batch's micro-batches, and compares every member's parameters with
// training on the whole batch: float64 within 1e-12, float32 within 1e-5.
// With "adamw-clip" every step clips by the global norm (the OptStep's
// before hook, over a Comm of all members counting per NormShare: FSDP
// members their shards, DP replica 0 alone), equal to the sequential norm
// of the whole batch's gradients, and steps AdamW.
func TestFSDPEqualsSequential(t *testing.T) {
	const maxNorm = 0.05
	const steps, perMember = 3, 2
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		for _, optName := range []string{"sgd", "adam", "adamw-clip"} {
			for _, n := range []int{1, 2, 3} {
				for _, mode := range []string{"fsdp", "dp"} {
					t.Run(fmt.Sprintf("%v/%s/n%d/%s", dt, optName, n, mode), func(t *testing.T) {
						newOpt := func() Optimizer {
							switch optName {
							case "adam":
								return NewAdam(0.01)
							case "adamw-clip":
								return &AdamW{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}
							}
							return &SGD{LR: 0.1, Momentum: 0.9}
						}
						clipping := optName == "adamw-clip"
						var refNorms []float64
						micro := perMember * n
						ref := dpModel(t, dt)
						refOpt := newOpt()
						for step := range steps {
							d := newDPData(dt, micro, step)
							all := make([]int, micro)
							for i := range all {
								all[i] = i
							}
							if err := trainMicro([]backwarder{ref[0], ref[1]}, d, all, 1/float64(micro)); err != nil {
								t.Fatal(err)
							}
							ps := append(ref[0].Params(), ref[1].Params()...)
							if clipping {
								norm, err := ClipGradNorm(nil, ps, ps, maxNorm)
								if err != nil {
									t.Fatal(err)
								}
								refNorms = append(refNorms, norm)
							}
							if err := refOpt.Step(ps); err != nil {
								t.Fatal(err)
							}
							ZeroGrad(ps)
						}
						want := [][]float64{flatOf(t, ref[0].Params()), flatOf(t, ref[1].Params())}

						trs := transport.NewInProc(n, transport.InProcTimeout(20*time.Second))
						got := make([][][]float64, n)
						norms := make([][]float64, n)
						stats := make([]MemStats, n)
						errs := make([]error, n)
						var wg sync.WaitGroup
						for r := range n {
							wg.Go(func() {
								errs[r] = func() error {
									comm, err := collective.New(trs[r], abi.ActChannel)
									if err != nil {
										return err
									}
									all, err := collective.New(trs[r], abi.GradChannel) // the clipping's, over every member
									if err != nil {
										return err
									}
									var before []func() error
									clip := func(ps []*Param, share NormShare) {
										if clipping {
											before = append(before, func() error {
												norm, err := ClipGradNorm(all, share.Counted(ps), ps, maxNorm)
												norms[r] = append(norms[r], norm)
												return err
											})
										}
									}
									model := dpModel(t, dt)
									opt := newOpt()
									mine := make([]int, perMember)
									for i := range mine {
										mine[i] = r*perMember + i
									}
									if mode == "dp" {
										dpar, err := NewDataParallel(comm, append(model[0].Params(), model[1].Params()...))
										if err != nil {
											return err
										}
										clip(dpar.Params(), NormShare{Replica: r})
										step := dpar.OptStep(opt, before...)
										for s := range steps {
											if err := trainMicro([]backwarder{model[0], model[1]}, newDPData(dt, micro, s), mine, 1/float64(micro)); err != nil {
												return err
											}
											if err := step(); err != nil {
												return err
											}
										}
										got[r] = [][]float64{flatOf(t, model[0].Params()), flatOf(t, model[1].Params())}
										stats[r] = dpar.Stats()
										return nil
									}
									g, err := NewFSDPGroup(comm)
									if err != nil {
										return err
									}
									var fs []*FSDP
									for i, st := range model {
										f, err := g.Wrap(st, fmt.Sprintf("stage %d", i))
										if err != nil {
											return err
										}
										fs = append(fs, f)
									}
									clip(g.Params(), NormShare{Replica: r, Sharded: true})
									step := g.OptStep(opt, before...)
									for s := range steps {
										for _, f := range fs {
											if err := f.Unshard(); err != nil {
												return err
											}
										}
										if err := trainMicro([]backwarder{fs[0], fs[1]}, newDPData(dt, micro, s), mine, 1/float64(micro)); err != nil {
											return err
										}
										for _, f := range []*FSDP{fs[1], fs[0]} {
											if err := f.ReduceGrad(); err != nil {
												return err
											}
											if err := f.Reshard(); err != nil {
												return err
											}
										}
										if err := step(); err != nil {
											return err
										}
									}
									for _, f := range fs {
										full, err := f.Gather()
										if err != nil {
											return err
										}
										var v []float64
										for _, x := range full {
											v = append(v, flatOf(t, []*Param{{Value: x, Grad: x}})...)
										}
										got[r] = append(got[r], v)
									}
									stats[r] = g.Stats()
									return nil
								}()
							})
						}
						wg.Wait()
						if err := errors.Join(errs...); err != nil {
							t.Fatal(err)
						}
						tol := 1e-12
						if dt == tensor.Float32 {
							tol = 1e-5
						}
						if clipping && slices.Max(refNorms) <= maxNorm {
							t.Errorf("norms %v never above %v: the clipping was not tested", refNorms, maxNorm)
						}
						for r := range n {
							if clipping {
								for s := range refNorms {
									if relErr(norms[r][s], refNorms[s]) > tol {
										t.Errorf("member %d step %d: global norm %.17g, sequential %.17g", r, s, norms[r][s], refNorms[s])
									}
								}
							}
							worst := 0.0
							for s := range want {
								for i := range want[s] {
									e := relErr(got[r][s][i], want[s][i])
									if clipping {
										// Adam moves every parameter by about LR a step,
										// so a bias near 0 (2.4e-5 after steps of ±0.01)
										// is compared on that scale.
										e = math.Abs(got[r][s][i]-want[s][i]) / math.Max(math.Abs(want[s][i]), 0.01)
									}
									worst = math.Max(worst, e)
								}
							}
							if worst > tol {
								t.Errorf("member %d: max relative difference %.3g from training on the whole batch (tolerance %g)", r, worst, tol)
							}
						}
						// Memory: FSDP keeps ⌈L/n⌉ per stage; DP the whole L.
						es := int64(dt.Size())
						var full, shard int64
						for _, st := range dpModel(t, dt) {
							L := 0
							for _, p := range st.Params() {
								L += p.Value.Shape().TotalSize()
							}
							full += int64(L) * es
							shard += int64(collective.ChunkLen(L, n)) * es
						}
						wantP := full
						if mode == "fsdp" {
							wantP = shard
						}
						optSlots := int64(1)
						if optName != "sgd" {
							optSlots = 2
						}
						m := stats[0]
						if m.ParamBytes != wantP || m.GradBytes != wantP || m.OptimBytes != optSlots*wantP {
							t.Errorf("memory %v; want parameters = gradients = %d bytes, optimizer %d", m, wantP, optSlots*wantP)
						}
						if mode == "fsdp" && m.PeakGathered != 2 {
							t.Errorf("peak gathered stages %d; want 2 (both stages unsharded at once)", m.PeakGathered)
						}
					})
				}
			}
		}
	}
}

// TestFSDPUnshardIsAsync: Unshard returns while the other member has not
// joined the all-gather; the stage's Forward waits for it.
func TestFSDPUnshardIsAsync(t *testing.T) {
	trs := transport.NewInProc(2, transport.InProcTimeout(20*time.Second))
	var fs [2]*FSDP
	for r := range fs {
		comm, _ := collective.New(trs[r], abi.ActChannel)
		g, _ := NewFSDPGroup(comm)
		var err error
		if fs[r], err = g.Wrap(dpModel(t, tensor.Float64)[0], "stage 0"); err != nil {
			t.Fatal(err)
		}
	}
	x := newDPData(tensor.Float64, 1, 0).in[0]
	if _, _, err := fs[0].Forward(x); err == nil || !strings.Contains(err.Error(), "stage 0 computes while its parameters are sharded") {
		t.Fatalf("Forward of a sharded stage: %v", err)
	}
	if err := fs[0].Unshard(); err != nil {
		t.Fatal(err)
	}
	if fs[0].pending.Done() {
		t.Fatal("the all-gather ended without the other member")
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := fs[0].Forward(x)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Forward returned before the all-gather could end: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := fs[1].Unshard(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := fs[0].Unshard(); err == nil || !strings.Contains(err.Error(), "unsharded already") {
		t.Errorf("a second Unshard: %v", err)
	}
}

// TestFSDPFailedMember: a member that aborts fails the others' pending
// all-gather at the next compute, naming it.
func TestFSDPFailedMember(t *testing.T) {
	trs := transport.NewInProc(2, transport.InProcTimeout(20*time.Second))
	comm, _ := collective.New(trs[0], abi.ActChannel)
	g, _ := NewFSDPGroup(comm)
	f, err := g.Wrap(dpModel(t, tensor.Float64)[1], "stage 1")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Unshard(); err != nil {
		t.Fatal(err)
	}
	trs[1].Abort(errors.New("out of memory"))
	_, _, err = f.Forward(randMatrix(tensor.Float64, 2, 5, NewRand(1)))
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !strings.Contains(err.Error(), "all-gather of its UNSHARD failed") {
		t.Fatalf("%v; want the all-gather's failure naming rank 1", err)
	}
	if err := f.Reshard(); err == nil {
		t.Error("Reshard after a failed all-gather succeeded")
	}
}

// paramsOnly passes on a Sequential's ParamStage methods only: it is no
// pipe.Recomputable.
type paramsOnly struct{ ParamStage }

// soloGroup returns an FSDP group of one member (in process).
func soloGroup(t *testing.T) *FSDPGroup {
	t.Helper()
	trs := transport.NewInProc(1)
	comm, err := collective.New(trs[0], abi.ActChannel)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewFSDPGroup(comm)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestFSDPAsStage: FSDP.AsStage passes Select, Drop and Rebuild on to a
// stage that has them (Rebuild waiting for the parameters as Forward
// does: it fails while sharded), and makes no stage recomputable that is
// not; *FSDP itself never claims it.
func TestFSDPAsStage(t *testing.T) {
	g := soloGroup(t)
	m := dpModel(t, tensor.Float64)
	f, err := g.Wrap(m[0], "stage 0")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := any(f).(recomputable); ok {
		t.Fatal("*FSDP claims Recomputable itself")
	}
	st, ok := f.AsStage().(recomputable)
	if !ok {
		t.Fatalf("AsStage of an FSDP of a *Sequential is a %T, no Recomputable", f.AsStage())
	}
	if err := st.Select(0.5, nil); err != nil {
		t.Fatal(err)
	}
	if m[0].recompute == nil {
		t.Fatal("Select did not reach the Sequential")
	}
	if _, err := st.Rebuild(nil); err == nil || !strings.Contains(err.Error(), "FSDP.Rebuild: stage 0 computes while its parameters are sharded") {
		t.Fatalf("Rebuild while sharded: %v", err)
	}
	h, err := g.Wrap(paramsOnly{m[1]}, "stage 1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.AsStage().(recomputable); ok {
		t.Fatal("AsStage of an FSDP of a stage without Select, Drop and Rebuild claims Recomputable")
	}
}

// TestFSDPRelease: an FSDP passes Release on to a stage that reuses a
// forward-only context (a second Release of the same context is the
// Sequential's error, so the first reached it), AsStage's wrapper too, and
// does nothing for a stage without it.
func TestFSDPRelease(t *testing.T) {
	g := soloGroup(t)
	m := dpModel(t, tensor.Float64)
	f, err := g.Wrap(m[0], "stage 0")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Unshard(); err != nil {
		t.Fatal(err)
	}
	x := newDPData(tensor.Float64, 1, 0).in[0]
	for name, st := range map[string]any{"FSDP": f, "AsStage": f.AsStage()} {
		r, ok := st.(releaser)
		if !ok {
			t.Fatalf("%s: %T is no pipe.Releaser", name, st)
		}
		_, saved, err := f.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Release(saved); err != nil {
			t.Fatalf("%s: Release: %v", name, err)
		}
		if err := r.Release(saved); err == nil || !strings.Contains(err.Error(), "Sequential.Release") {
			t.Errorf("%s: a second Release of one context: %v; want the Sequential's error", name, err)
		}
	}
	h, err := g.Wrap(paramsOnly{m[1]}, "stage 1")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(struct{}{}); err != nil {
		t.Errorf("Release through an FSDP of a stage without it: %v; want nil", err)
	}
}
