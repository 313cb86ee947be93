package nn

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"
)

// MSE is the mean squared error loss
//
//	loss = Scale · (1/rows) · Σ_r (1/features) · Σ_f (y[r,f] - target[r,f])²
//
// that is, Scale times PyTorch's MSELoss with reduction "mean". target has
// y's shape and is float32 or float64, whatever y's dtype is. A Scale of 0
// means 1. For micro-batch m of n_m rows out of a batch of N rows, set Scale
// to n_m/N (1/M for M equal micro-batches). The micro-batch losses and
// gradients then sum to those of the full-batch mean.
type MSE struct {
	Scale float64
}

// SoftmaxCrossEntropy is the cross-entropy of softmax(y) over y's last axis
// (the logits of C classes):
//
//	loss = Scale · (1/rows) · Σ_r ℓ_r,   ℓ_r = Σ_c t[r,c] · (logsumexp(y[r,:]) - y[r,c])
//
// The target has one of two forms, picked by its shape:
//
//   - Class indices: shape [rows] or [rows, 1] (when C > 1). Each value is an
//     integer in [0, C) stored as a float, and t[r,:] is its one-hot vector.
//   - Distributions: shape [rows, C]. Each row holds class probabilities:
//     one-hot rows, or soft labels that sum to 1.
//
// The target is float32 or float64, whatever y's dtype is. A Scale of 0
// means 1. Set Scale per micro-batch as for MSE.
type SoftmaxCrossEntropy struct {
	Scale float64
}

// lossArgs checks the arguments of a loss: the effective scale of s, the
// output y as a rows×cols matrix and the target.
func lossArgs(where string, s float64, y, tgt *tensor.Dense) (scale float64, ym *tensor.Dense, rows, cols int, t *tensor.Dense, err error) {
	if scale, err = lossScale(where, s); err != nil {
		return 0, nil, 0, 0, nil, err
	}
	if ym, rows, cols, err = matrix(where, "output", y); err != nil {
		return 0, nil, 0, 0, nil, err
	}
	if t, err = target(where, tgt); err != nil {
		return 0, nil, 0, 0, nil, err
	}
	return scale, ym, rows, cols, t, nil
}

// lossScale returns the effective scale.
func lossScale(where string, s float64) (float64, error) {
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return 0, fmt.Errorf("nn: %s: Scale %v is not finite", where, s)
	}
	if s == 0 {
		return 1, nil
	}
	return s, nil
}

// target checks a target tensor: float32/float64, non-empty, contiguous.
func target(where string, t *tensor.Dense) (*tensor.Dense, error) {
	if t == nil {
		return nil, fmt.Errorf("nn: %s: target is nil", where)
	}
	if !checkDtype(t.Dtype()) {
		return nil, fmt.Errorf("nn: %s: target %v has dtype %v, want float32 or float64", where, t.Shape(), t.Dtype())
	}
	if t.Shape().TotalSize() == 0 || len(t.Shape()) == 0 {
		return nil, fmt.Errorf("nn: %s: target has empty shape %v", where, t.Shape())
	}
	return contiguous(where, "target", t)
}

// Loss returns the scaled mean squared error of y against target and its
// gradient dy with y's shape and dtype.
func (m MSE) Loss(y, tgt *tensor.Dense) (float64, *tensor.Dense, error) {
	const where = "MSE.Loss"
	scale, y, rows, cols, tgt, err := lossArgs(where, m.Scale, y, tgt)
	if err != nil {
		return 0, nil, err
	}
	if !sameShape(tgt.Shape(), y.Shape()) {
		return 0, nil, fmt.Errorf("nn: %s: target shape %v does not match output shape %v", where, tgt.Shape(), y.Shape())
	}
	dy := newMatrix(y.Dtype(), rows, cols)
	c := scale / float64(rows*cols)
	var loss float64
	switch {
	case y.Dtype() == tensor.Float32 && tgt.Dtype() == tensor.Float32:
		loss = mse(data[float32](y), data[float32](tgt), data[float32](dy), c)
	case y.Dtype() == tensor.Float32:
		loss = mse(data[float32](y), data[float64](tgt), data[float32](dy), c)
	case tgt.Dtype() == tensor.Float32:
		loss = mse(data[float64](y), data[float32](tgt), data[float64](dy), c)
	default:
		loss = mse(data[float64](y), data[float64](tgt), data[float64](dy), c)
	}
	return loss, dy, nil
}

// mse sets dy = 2c(y-t) and returns c·Σ(y-t)², computed in float64.
func mse[Y, T float](y []Y, t []T, dy []Y, c float64) float64 {
	t, dy = t[:len(y)], dy[:len(y)]
	var sum float64
	for i, v := range y {
		d := float64(v) - float64(t[i])
		sum += d * d
		dy[i] = Y(2 * c * d)
	}
	return c * sum
}

// Loss returns the scaled mean cross-entropy of softmax(y) against target
// and its gradient dy with y's shape and dtype.
func (l SoftmaxCrossEntropy) Loss(y, tgt *tensor.Dense) (float64, *tensor.Dense, error) {
	const where = "SoftmaxCrossEntropy.Loss"
	scale, y, rows, classes, tgt, err := lossArgs(where, l.Scale, y, tgt)
	if err != nil {
		return 0, nil, err
	}
	ts := tgt.Shape()
	var index bool
	switch {
	case len(ts) == 2 && ts[0] == rows && ts[1] == classes:
		index = false
	case (len(ts) == 1 && ts[0] == rows) || (len(ts) == 2 && ts[0] == rows && ts[1] == 1):
		index = true
	default:
		return 0, nil, fmt.Errorf("nn: %s: target shape %v does not fit output shape %v: want (%d) or (%d, 1) class indices, or (%d, %d) class probabilities",
			where, ts, y.Shape(), rows, rows, rows, classes)
	}
	dy := newMatrix(y.Dtype(), rows, classes)
	c := scale / float64(rows)
	var loss float64
	switch {
	case y.Dtype() == tensor.Float32 && tgt.Dtype() == tensor.Float32:
		loss, err = softmaxCE(data[float32](y), data[float32](tgt), data[float32](dy), rows, classes, index, c)
	case y.Dtype() == tensor.Float32:
		loss, err = softmaxCE(data[float32](y), data[float64](tgt), data[float32](dy), rows, classes, index, c)
	case tgt.Dtype() == tensor.Float32:
		loss, err = softmaxCE(data[float64](y), data[float32](tgt), data[float64](dy), rows, classes, index, c)
	default:
		loss, err = softmaxCE(data[float64](y), data[float64](tgt), data[float64](dy), rows, classes, index, c)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	return loss, dy, nil
}

// softmaxCE returns c·Σ_r ℓ_r and sets dy = c·(softmax(y)·Σt - t), computed
// in float64. With index, t holds one class index per row.
func softmaxCE[Y, T float](y []Y, t []T, dy []Y, rows, classes int, index bool, c float64) (float64, error) {
	var loss float64
	for r := range rows {
		yr := y[r*classes : (r+1)*classes]
		dr := dy[r*classes : (r+1)*classes]
		mx := math.Inf(-1)
		for _, v := range yr {
			mx = math.Max(mx, float64(v))
		}
		var se float64
		for _, v := range yr {
			se += math.Exp(float64(v) - mx)
		}
		lse := mx + math.Log(se)
		if index {
			tv := float64(t[r])
			k := int(tv)
			if tv != math.Trunc(tv) || tv < 0 || tv >= float64(classes) {
				return 0, fmt.Errorf("target row %d holds class index %v, want an integer in [0, %d)", r, tv, classes)
			}
			loss += lse - float64(yr[k])
			for j, v := range yr {
				dr[j] = Y(c * math.Exp(float64(v)-lse))
			}
			dr[k] = Y(c * (math.Exp(float64(yr[k])-lse) - 1))
			continue
		}
		tr := t[r*classes : (r+1)*classes]
		var ts, ty float64
		for j, v := range yr {
			ts += float64(tr[j])
			ty += float64(tr[j]) * float64(v)
		}
		loss += lse*ts - ty
		for j, v := range yr {
			dr[j] = Y(c * (math.Exp(float64(v)-lse)*ts - float64(tr[j])))
		}
	}
	return c * loss, nil
}
