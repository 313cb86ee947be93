package nn

import (
	"errors"
	"fmt"
	"math"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/collective"
)

// NormShare says which of a rank's parameters it counts in the global
// gradient norm (the package doc's rule, "Gradient clipping").
type NormShare struct {
	// Replica is the rank's data-parallel replica (runtime/mesh's dp
	// coordinate); 0 without data parallelism.
	Replica int
	// Sharded says the parameters are FSDP shards (FSDPGroup.Params):
	// every replica counts its own. Otherwise only replica 0 counts.
	Sharded bool
	// Skip are parameters whose gradient another copy counts: a tie's
	// copy on its later stage, the parameters of model copy 1.
	Skip []*Param
}

// Counted returns the parameters of params that this rank counts, in
// order: none on a replica other than 0 unless Sharded, and never those in
// Skip.
func (s NormShare) Counted(params []*Param) []*Param {
	if s.Replica != 0 && !s.Sharded {
		return nil
	}
	skip := make(map[*Param]bool, len(s.Skip))
	for _, p := range s.Skip {
		skip[p] = true
	}
	var out []*Param
	for _, p := range params {
		if !skip[p] {
			out = append(out, p)
		}
	}
	return out
}

// ErrNonFiniteNorm is wrapped by ClipGradNorm's error when the global norm
// is NaN or infinite (a gradient overflowed): no gradient is scaled, as
// PyTorch's clip_grad_norm_ with error_if_nonfinite=True.
var ErrNonFiniteNorm = errors.New("the global gradient norm is not finite")

// GradSquares returns the sum of the squares of the gradient elements of
// params (each parameter once, in order), in float64.
func GradSquares(params []*Param) (float64, error) {
	if err := checkParams("GradSquares", params); err != nil {
		return 0, err
	}
	var sum float64
	for _, p := range params {
		switch p.Grad.Dtype() {
		case tensor.Float32:
			sum += squares(data[float32](p.Grad))
		default:
			sum += squares(data[float64](p.Grad))
		}
	}
	return sum, nil
}

func squares[T float](g []T) float64 {
	var s float64
	for _, x := range g {
		s += float64(x) * float64(x)
	}
	return s
}

// ClipGradNorm clips the gradients by the global L2 norm and returns the
// norm before clipping. counted are the parameters this rank counts
// (NormShare.Counted), params all those it steps on (a superset: skipped
// copies are scaled too, so the copies stay equal). comm is a
// collective.Comm over the whole world (every rank of every replica, e.g.
// World.NewComm on the world endpoint), every rank calling ClipGradNorm at
// the same point (its OPT_STEP); nil for a world of one rank. When the norm
// exceeds maxNorm, every gradient is multiplied by maxNorm/(norm+1e-6)
// (torch.nn.utils.clip_grad_norm_'s coefficient), else left unchanged.
// maxNorm must be positive and finite; a non-finite norm is returned with
// an error wrapping ErrNonFiniteNorm and nothing scaled.
func ClipGradNorm(comm *collective.Comm, counted, params []*Param, maxNorm float64) (float64, error) {
	const where = "ClipGradNorm"
	if math.IsNaN(maxNorm) || math.IsInf(maxNorm, 0) || maxNorm <= 0 {
		return 0, fmt.Errorf("nn: %s: max norm %v; want a positive finite number", where, maxNorm)
	}
	if err := checkParams(where, params); err != nil {
		return 0, err
	}
	sum, err := GradSquares(counted)
	if err != nil {
		return 0, err
	}
	if comm != nil && comm.Size() > 1 {
		t := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{sum}))
		if err := comm.AllReduce(t); err != nil {
			return 0, fmt.Errorf("nn: %s: all-reduce of the squared norms: %w", where, err)
		}
		sum = t.Data().([]float64)[0]
	}
	norm := math.Sqrt(sum)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, fmt.Errorf("nn: %s: %w (%v)", where, ErrNonFiniteNorm, norm)
	}
	coef := maxNorm / (norm + 1e-6)
	if coef >= 1 {
		return norm, nil
	}
	for _, p := range params {
		switch p.Grad.Dtype() {
		case tensor.Float32:
			scale(data[float32](p.Grad), coef)
		default:
			scale(data[float64](p.Grad), coef)
		}
	}
	return norm, nil
}

func scale[T float](g []T, c float64) {
	for i := range g {
		g[i] = T(float64(g[i]) * c)
	}
}
