package nn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/mesh"
	"github.com/ppgen/ppgen/runtime/world"
)

// clipModel is a model of four parameters as a sequential run holds them:
// an embedding table (tied to the head), two weights and a bias.
var clipModel = []struct {
	name string
	grad []float64
}{
	{"embed", []float64{0.5, -1, 2, 0.25, -0.75, 1.5}},
	{"w1", []float64{3, -0.5, 0.125, 1}},
	{"b1", []float64{-2, 0.1}},
	{"w2", []float64{0.3, 0.6, -0.9, 1.2, -1.5}},
}

// clipRankParams is what pipeline rank pp of a P=2 pipeline holds: rank 0
// the embedding and w1, rank 1 b1, w2 and the head's copy of the embedding
// (tied: after TIE_GRAD its gradient equals the embedding's). With sharded,
// every parameter is cut into DP = 2 halves (FSDP), the replica's half
// (zero-padded) being its parameter. It returns the rank's parameters and
// those it skips (the tie's later copy).
func clipRankParams(dt tensor.Dtype, pp, dp int, sharded bool) (all, skip []*Param) {
	idx := [][]int{{0, 1}, {2, 3, 0}}[pp]
	for j, i := range idx {
		g := clipModel[i].grad
		if sharded {
			k := (len(g) + 1) / 2
			half := make([]float64, k)
			copy(half, g[min(dp*k, len(g)):min((dp+1)*k, len(g))])
			g = half
		}
		p := vectorParam(dt, clipModel[i].name, make([]float64, len(g)))
		setGrad(p, g)
		all = append(all, p)
		if pp == 1 && j == 2 {
			skip = append(skip, p)
		}
	}
	return all, skip
}

// TestClipGradNormMesh: on an in-process world of P=2 × DP=2 ranks, the
// global norm every rank gets equals the sequential norm over the model's
// four parameters (the tied one once), for plain data parallelism and for
// FSDP shards, and the clipped gradients are the sequential ones scaled by
// maxNorm/(norm+1e-6).
func TestClipGradNormMesh(t *testing.T) {
	// The sequential norm of the gradients as dtype dt holds them.
	normOf := func(dt tensor.Dtype) float64 {
		var sum float64
		for _, p := range clipModel {
			for _, g := range p.grad {
				if dt == tensor.Float32 {
					g = float64(float32(g))
				}
				sum += g * g
			}
		}
		return math.Sqrt(sum)
	}
	m, err := mesh.New(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, sharded := range []bool{false, true} {
		for _, ratio := range []float64{1.0 / 3, 2} {
			for _, dt := range dtypes {
				seqNorm := normOf(dt)
				maxNorm := seqNorm * ratio
				t.Run(fmt.Sprintf("sharded=%v/max=%.3g·norm/%v", sharded, ratio, dt), func(t *testing.T) {
					w, err := world.Open(context.Background(), "inproc", world.Options{Size: m.World()})
					if err != nil {
						t.Fatal(err)
					}
					defer w.Close()
					norms := make([]float64, m.World())
					params := make([][]*Param, m.World())
					errs := make([]error, m.World())
					var wg sync.WaitGroup
					for r := range m.World() {
						wg.Go(func() {
							pp, dp := m.Coords(r)
							comm, err := w.NewComm(w.Endpoints[r], abi.GradChannel)
							if err != nil {
								errs[r] = err
								return
							}
							all, skip := clipRankParams(dt, pp, dp, sharded)
							share := NormShare{Replica: dp, Sharded: sharded, Skip: skip}
							params[r] = all
							norms[r], errs[r] = ClipGradNorm(comm, share.Counted(all), all, maxNorm)
						})
					}
					wg.Wait()
					if err := errors.Join(errs...); err != nil {
						t.Fatal(err)
					}
					tol := 1e-15
					if dt == tensor.Float32 {
						tol = 1e-7
					}
					for r, n := range norms {
						if math.Abs(n-seqNorm) > 4e-16*seqNorm {
							t.Errorf("rank %d: norm %.17g, sequential %.17g", r, n, seqNorm)
						}
					}
					coef := min(1, maxNorm/(seqNorm+1e-6))
					for r := range m.World() {
						pp, dp := m.Coords(r)
						want, _ := clipRankParams(dt, pp, dp, sharded)
						for i, p := range params[r] {
							exp := f64(want[i].Grad)
							for j := range exp {
								exp[j] *= coef
							}
							if d := maxRelDiff(f64(p.Grad), exp, 1e-300); d > tol {
								t.Errorf("rank %d %s: gradient %v, want %v", r, p.Name, f64(p.Grad), exp)
							}
						}
					}
				})
			}
		}
	}
}

func TestClipGradNormOneRank(t *testing.T) {
	p := vectorParam(tensor.Float64, "p", []float64{0, 0})
	setGrad(p, []float64{3, 4})
	norm, err := ClipGradNorm(nil, []*Param{p}, []*Param{p}, 1)
	if err != nil || norm != 5 {
		t.Fatalf("norm %v, %v; want 5", norm, err)
	}
	c := 1 / (5 + 1e-6)
	if got := f64(p.Grad); !slices.Equal(got, []float64{3 * c, 4 * c}) {
		t.Errorf("clipped %v", got)
	}
	// Below the limit nothing changes, bit for bit.
	setGrad(p, []float64{0.3, 0.4})
	if _, err := ClipGradNorm(nil, []*Param{p}, []*Param{p}, 1); err != nil || !slices.Equal(f64(p.Grad), []float64{0.3, 0.4}) {
		t.Errorf("unclipped %v, %v", f64(p.Grad), err)
	}
	setGrad(p, []float64{math.Inf(1), 1})
	if norm, err := ClipGradNorm(nil, []*Param{p}, []*Param{p}, 1); !errors.Is(err, ErrNonFiniteNorm) || !math.IsInf(norm, 1) || f64(p.Grad)[1] != 1 {
		t.Errorf("infinite gradient: norm %v, %v, gradient %v", norm, err, f64(p.Grad))
	}
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, err := ClipGradNorm(nil, nil, []*Param{p}, bad); err == nil || !strings.Contains(err.Error(), "max norm") {
			t.Errorf("max norm %v: %v", bad, err)
		}
	}
	var comm *collective.Comm
	if _, err := ClipGradNorm(comm, []*Param{p, p}, []*Param{p}, 1); err == nil || !strings.Contains(err.Error(), "appears twice") {
		t.Errorf("a parameter counted twice: %v", err)
	}
}

func TestNormShareCounted(t *testing.T) {
	a, b, c := vectorParam(tensor.Float64, "a", []float64{1}), vectorParam(tensor.Float64, "b", []float64{1}), vectorParam(tensor.Float64, "c", []float64{1})
	ps := []*Param{a, b, c}
	for _, tc := range []struct {
		share NormShare
		want  []*Param
	}{
		{NormShare{}, ps},
		{NormShare{Skip: []*Param{b}}, []*Param{a, c}},
		{NormShare{Replica: 1}, nil},
		{NormShare{Replica: 1, Sharded: true, Skip: []*Param{c}}, []*Param{a, b}},
	} {
		if got := tc.share.Counted(ps); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %d counted, want %d", tc.share, len(got), len(tc.want))
		}
	}
}
