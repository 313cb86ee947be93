package train_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/swap"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/train/internal/testprog"
)

// fsdpSelective is FSDP's program (1f1b at P=4, two sharded replicas)
// recomputing half of each stage's layers.
var fsdpSelective = train.Program{Spec: testprog.FSDPSelectiveSpec, Ranks: testprog.FSDPSelectiveRanks[:]}

// onef1bPeaks is the peak of live chunks gen/verify proves of each rank
// r of 1f1b at P = 4 with M ≥ P (e2e's TestRecomputeTrainPeaks checks it
// against the verifier): r holds P − r chunks after its warmup; under
// selective:0.5 each of them keeps half until its RECOMPUTE, just before
// its backward, so at the oldest one's RECOMPUTE r holds P − r − 1 halves
// and one whole chunk: (P − r + 1)/2; without recompute P − r.
func onef1bPeaks(selective bool) []float64 {
	const P = 4
	out := make([]float64, P)
	for r := range out {
		out[r] = P - float64(r)
		if selective {
			out[r] = (P - float64(r) + 1) / 2
		}
	}
	return out
}

// checkPeaks fails unless every rank of res measured the peak of live
// chunks the verifier proves of its pipeline rank (want).
func checkPeaks(t *testing.T, res *train.Result, want []float64) {
	t.Helper()
	for r, rep := range res.Ranks {
		if rep.PeakLive != want[rep.Pipe] {
			t.Errorf("world rank %d (pipeline rank %d): measured peak %v chunks; the verifier's %v (all ranks: %v)", r, rep.Pipe, rep.PeakLive, want[rep.Pipe], want)
		}
	}
}

// TestRecomputeWrapped: a selective recompute policy (-recompute
// selective:0.5: each stage drops and rebuilds its first layer) under a
// wrapper of the loop's nn.Sequential stages, FSDP (nn.FSDP.AsStage) and a
// WrapStage wrapper (SwapTiers: nn.Swapping), trains to the losses and
// parameters of the same job without recompute, bit for bit, and each
// rank's measured peak of live chunks (RankReport.PeakLive) is the
// verifier's, which counts half of each recomputing chunk: a wrapper that
// stopped passing pipe.Recomputable on would make its stages recompute
// whole (a lower peak) or the loop refuse it (TestRecomputeHidden).
func TestRecomputeWrapped(t *testing.T) {
	t.Run("fsdp", func(t *testing.T) {
		job := func(p train.Program) *train.Result {
			c := config(p, 2, 2)
			c.FSDP = true
			return run(t, c)
		}
		ref, got := job(fsdp), job(fsdpSelective)
		same(t, "losses", losses(got), losses(ref))
		same(t, "parameters", values(got), values(ref))
		checkPeaks(t, got, onef1bPeaks(true))
		checkPeaks(t, ref, onef1bPeaks(false))
	})
	t.Run("wrapstage", func(t *testing.T) {
		ref := run(t, config(onef1b, 1, 2))
		ts := &train.SwapTiers{New: func() (*swap.Tier, error) { return swap.NewHost(), nil }}
		defer ts.Close()
		c := config(selective, 1, 2)
		c.WrapStage = ts.Wrap
		got := run(t, c)
		same(t, "losses", losses(got), losses(ref))
		same(t, "parameters", values(got), values(ref))
		checkPeaks(t, got, onef1bPeaks(true))
		if st := ts.Tier(0).Stats(); st.Offloads != 0 {
			t.Fatalf("rank 0's tier: %+v; the program has no swap steps", st)
		}
	})
}

// hiding is a WrapStage wrapper that passes on only nn.ParamStage's
// methods: it hides the Sequential's Select, Drop and Rebuild.
type hiding struct{ nn.ParamStage }

// TestRecomputeHidden: a WrapStage wrapper that hides pipe.Recomputable is
// refused at start-up under a selective policy (the stage would recompute
// whole, not the share the program counted), naming the stage and the
// fix; under -recompute full, which recomputes whole anyway, it trains.
func TestRecomputeHidden(t *testing.T) {
	wrap := func(_, _ int, seq *nn.Sequential) (nn.ParamStage, error) { return hiding{seq}, nil }
	c := config(selective, 1, 1)
	c.WrapStage = wrap
	_, err := train.Run(context.Background(), c)
	for _, want := range []string{"stage 0 recomputes a selection of its layers", "train_test.hiding", "forward Select, Drop and Rebuild", "-recompute full"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("a wrapper hiding Recomputable under -recompute selective: error %v, want one containing %q", err, want)
		}
	}
	c = config(recompute, 1, 1)
	c.WrapStage = wrap
	run(t, c)
}

// swapRecompute is 1f1b at P=4 that swaps the chunks of stages 0 and 1
// (-swap 4) and recomputes those of stages 2 (half of its layers) and 3
// (whole): the two ways of freeing activations, mixed over the stages.
var swapRecompute = train.Program{Spec: testprog.SwapRecomputeSpec, Ranks: testprog.SwapRecomputeRanks[:]}

// TestSwapBesideRecompute: a program that swaps some stages' chunks and
// recomputes the others' trains, with stages that swap to a host tier
// (SwapTiers, whose nn.Swapping passes pipe.Recomputable on), to the
// losses and parameters of plain 1f1b bit for bit; rank 0's tier moved
// chunks out and back, and the ranks of stages 2 and 3 none.
func TestSwapBesideRecompute(t *testing.T) {
	base := run(t, config(onef1b, 1, 2))
	ts := &train.SwapTiers{New: func() (*swap.Tier, error) { return swap.NewHost(), nil }}
	defer ts.Close()
	c := config(swapRecompute, 1, 2)
	c.WrapStage = ts.Wrap
	res := run(t, c)
	same(t, "losses", losses(res), losses(base))
	same(t, "parameters", values(res), values(base))
	if st := ts.Tier(0).Stats(); st.Offloads == 0 || st.Loads != st.Offloads {
		t.Errorf("rank 0's tier: %d offloads, %d loads; want some, as many loads", st.Offloads, st.Loads)
	}
	for r := 2; r < 4; r++ {
		if st := ts.Tier(r).Stats(); st.Offloads != 0 {
			t.Errorf("rank %d's tier: %d offloads; its stage recomputes, and swaps nothing", r, st.Offloads)
		}
	}
}
