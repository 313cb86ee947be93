package train_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/swap"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/train/internal/testprog"
)

// swapProg is 1f1b at P=4 with swap steps, and its program as data.
var swapProg = train.Program{Spec: testprog.SwapSpec, Ranks: testprog.SwapRanks[:], Ops: testprog.SwapProgram}

// values returns the values of res's trained layers, in layer order.
func values(res *train.Result) []float64 {
	var out []float64
	for i := range layers {
		for _, p := range res.Layers[i] {
			out = append(out, p.Value.Float64s()...)
		}
	}
	return out
}

// TestInterpretAndWrapStage trains the swap program four ways: generated
// functions or the interpreter (Interpret), plain stages or stages that
// swap their activations to a host tier (WrapStage): all four bit for bit
// alike, and the swapping ones offloaded.
func TestInterpretAndWrapStage(t *testing.T) {
	base := run(t, config(swapProg, 1, 3))
	for _, tc := range []struct {
		name            string
		interpret, swap bool
	}{
		{"interpreted", true, false},
		{"swapping", false, true},
		{"interpreted and swapping", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config(swapProg, 1, 3)
			c.Interpret = tc.interpret
			if tc.interpret {
				c.Train.Ranks = nil // the ops alone
			}
			ts := &train.SwapTiers{New: func() (*swap.Tier, error) { return swap.NewHost(), nil }}
			defer ts.Close()
			if tc.swap {
				c.WrapStage = ts.Wrap
			}
			res := run(t, c)
			same(t, "losses", losses(res), losses(base))
			same(t, "parameters", values(res), values(base))
			if !tc.swap {
				return
			}
			for r := range swapProg.Spec.Ranks {
				if ts.Tier(r) == nil {
					t.Fatalf("rank %d has no tier", r)
				}
			}
			if st := ts.Tier(0).Stats(); st.Offloads == 0 || st.Loads != st.Offloads {
				t.Fatalf("rank 0's tier: %d offloads, %d loads; want some, as many loads", st.Offloads, st.Loads)
			}
		})
	}
}

// TestMemory checks Result.Ranks' Memory: every rank's, its whole parameters,
// gradients and AdamW's two moments without FSDP (nn.WholeMem); with
// FSDP, half the parameters per replica and a peak of gathered stages.
func TestMemory(t *testing.T) {
	res := run(t, config(onef1b, 1, 1))
	if len(res.Ranks) != onef1b.Spec.Ranks {
		t.Fatalf("reports of %d ranks, want %d", len(res.Ranks), onef1b.Spec.Ranks)
	}
	total := int64(0)
	for r, rep := range res.Ranks {
		m := rep.Memory
		if m.ParamBytes == 0 || m.GradBytes != m.ParamBytes || m.OptimBytes != 2*m.ParamBytes {
			t.Fatalf("rank %d: %v; want parameters, as many gradient bytes and AdamW's two moments", r, m)
		}
		total += m.ParamBytes
	}
	want := int64(layers * (width*width + width) * 8)
	if total != want {
		t.Fatalf("%d parameter bytes over the ranks, want the model's %d", total, want)
	}
	c := config(fsdp, 2, 1)
	c.FSDP = true
	sharded := run(t, c)
	if len(sharded.Ranks) != 2*fsdp.Spec.Ranks {
		t.Fatalf("reports of %d ranks, want %d", len(sharded.Ranks), 2*fsdp.Spec.Ranks)
	}
	total = 0
	for r, rep := range sharded.Ranks {
		m := rep.Memory
		if rep.NativeDP || rep.Pipe*2+rep.Replica != r {
			t.Fatalf("rank %d reports %+v; want its coordinates (world rank = pp·DP + dp), runtime/collective's collectives in process", r, rep)
		}
		if m.PeakGathered < 1 {
			t.Fatalf("FSDP rank %d: %v; want a peak of gathered stages", r, m)
		}
		total += m.ParamBytes
	}
	if total < want || total > want+int64(2*fsdp.Spec.Stages*8) {
		t.Fatalf("%d bytes of shards over the ranks, want the model's %d (padded by at most one element per stage and replica)", total, want)
	}
}

// TestExtensionRefusals checks the errors of Interpret without a program
// as data and of a WrapStage that fails or holds other parameters.
func TestExtensionRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*train.Config)
		want string
	}{
		{"interpret without ops", func(c *train.Config) { c.Train, c.Interpret = onef1b, true }, "has no Ops (generate it with -table"},
		{"interpret with short ops", func(c *train.Config) {
			c.Interpret = true
			c.Train.Ops = c.Train.Ops[:2]
		}, "Ops for 2 ranks, its Spec 4"},
		{"wrapper fails", func(c *train.Config) {
			c.WrapStage = func(int, int, *nn.Sequential) (nn.ParamStage, error) { return nil, errors.New("no tier") }
		}, "WrapStage of stage 0: no tier"},
		{"wrapper of other parameters", func(c *train.Config) {
			c.WrapStage = func(_, _ int, seq *nn.Sequential) (nn.ParamStage, error) {
				return nn.NewSequential(seq.Layers[0]), nil
			}
		}, "not the 4 of the stage it wraps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config(swapProg, 1, 1)
			tc.edit(&c)
			_, err := train.Run(context.Background(), c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestSwapTiers: a tier that New does not make leaves the stages as they
// are, and New's error and a nil New are the job's errors.
func TestSwapTiers(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func() (*swap.Tier, error)
		want string // "": the job runs
	}{
		{"no tier", func() (*swap.Tier, error) { return nil, nil }, ""},
		{"failing tier", func() (*swap.Tier, error) { return nil, errors.New("disk full") }, "the swap tier of rank"},
		{"no New", nil, "SwapTiers.New is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := &train.SwapTiers{New: tc.new}
			defer ts.Close()
			c := config(swapProg, 1, 1)
			c.WrapStage = ts.Wrap
			_, err := train.Run(context.Background(), c)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "" && ts.Tier(0) != nil:
				t.Fatal("rank 0 has a tier")
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
