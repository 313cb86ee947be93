package nn

import (
	"fmt"

	"gorgonia.org/tensor"
)

// TiedHead is a language model's output layer that reads an Embedding's
// token table as its weight (weight tying): for x [rows, Dim] and Table
// [Vocab, Dim], the logits are y = x·Tableᵀ, [rows, Vocab]. Built on the
// Embedding's own Token parameter (NewTiedHead(e.Token)) the two layers
// share one parameter, whose gradient both backward passes add to; built
// on a copy (a pipeline's last stage, on another rank than the embedding's
// first) the two copies' gradients must be summed before each optimizer
// step to keep them one parameter.
type TiedHead struct {
	Vocab, Dim int
	Table      *Param // [Vocab, Dim]
	dtype      tensor.Dtype
}

type tiedSaved struct {
	h    *TiedHead
	x    *tensor.Dense // nil once BackwardWeight has run
	rows int
}

// NewTiedHead returns a TiedHead over table, a [vocab, dim] float32 or
// float64 parameter (an Embedding's Token, or a copy of it).
func NewTiedHead(table *Param) (*TiedHead, error) {
	const where = "NewTiedHead"
	if err := checkParam(where, table); err != nil {
		return nil, err
	}
	sh := table.Value.Shape()
	if len(sh) != 2 || sh[0] <= 0 || sh[1] <= 0 {
		return nil, fmt.Errorf("nn: %s: table %q has shape %v, want (vocab, dim)", where, table.Name, sh)
	}
	if !checkDtype(table.Value.Dtype()) {
		return nil, fmt.Errorf("nn: %s: table %q has dtype %v, want float32 or float64", where, table.Name, table.Value.Dtype())
	}
	h := &TiedHead{Vocab: sh[0], Dim: sh[1], Table: table, dtype: table.Value.Dtype()}
	return h, h.check(where)
}

// Params returns the table.
func (h *TiedHead) Params() []*Param { return []*Param{h.Table} }

func (h *TiedHead) check(where string) error {
	if h == nil || h.dtype.Type == nil {
		return fmt.Errorf("nn: %s: TiedHead is not initialized; build it with NewTiedHead", where)
	}
	return checkShapes(where, h.dtype, paramShape{h.Table, tensor.Shape{h.Vocab, h.Dim}})
}

// Forward returns x·Tableᵀ.
func (h *TiedHead) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	const where = "TiedHead.Forward"
	if err := h.check(where); err != nil {
		return nil, nil, err
	}
	x, rows, cols, err := matrix(where, "input", x)
	if err != nil {
		return nil, nil, err
	}
	if cols != h.Dim || x.Dtype() != h.dtype {
		return nil, nil, fmt.Errorf("nn: %s: input is %v %v, want %v (rows, %d)", where, x.Dtype(), x.Shape(), h.dtype, h.Dim)
	}
	y := newMatrix(h.dtype, rows, h.Vocab)
	switch h.dtype {
	case tensor.Float32:
		gemm(false, true, rows, h.Vocab, h.Dim, 1, data[float32](x), h.Dim, data[float32](h.Table.Value), h.Dim, 0, data[float32](y), h.Vocab)
	default:
		gemm(false, true, rows, h.Vocab, h.Dim, 1, data[float64](x), h.Dim, data[float64](h.Table.Value), h.Dim, 0, data[float64](y), h.Vocab)
	}
	return y, &tiedSaved{h: h, x: x, rows: rows}, nil
}

func (h *TiedHead) saved(where string, saved any, dy *tensor.Dense) (*tiedSaved, *tensor.Dense, error) {
	if err := h.check(where); err != nil {
		return nil, nil, err
	}
	s, ok := saved.(*tiedSaved)
	if !ok || s == nil || s.h != h {
		return nil, nil, fmt.Errorf("nn: %s: saved context is %T, want the one returned by this TiedHead's Forward", where, saved)
	}
	if s.x == nil {
		return nil, nil, fmt.Errorf("nn: %s: saved context was already released by BackwardWeight", where)
	}
	dy, err := sameAs(where, dy, h.dtype, s.rows, h.Vocab)
	return s, dy, err
}

// BackwardInput returns dx = dy·Table, [rows, Dim].
func (h *TiedHead) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	s, dy, err := h.saved("TiedHead.BackwardInput", saved, dy)
	if err != nil {
		return nil, err
	}
	dx := newMatrix(h.dtype, s.rows, h.Dim)
	switch h.dtype {
	case tensor.Float32:
		gemm(false, false, s.rows, h.Dim, h.Vocab, 1, data[float32](dy), h.Vocab, data[float32](h.Table.Value), h.Dim, 0, data[float32](dx), h.Dim)
	default:
		gemm(false, false, s.rows, h.Dim, h.Vocab, 1, data[float64](dy), h.Vocab, data[float64](h.Table.Value), h.Dim, 0, data[float64](dx), h.Dim)
	}
	return dx, nil
}

// BackwardWeight adds dyᵀ·x, [Vocab, Dim], to the table's gradient.
func (h *TiedHead) BackwardWeight(saved any, dy *tensor.Dense) error {
	s, dy, err := h.saved("TiedHead.BackwardWeight", saved, dy)
	if err != nil {
		return err
	}
	switch h.dtype {
	case tensor.Float32:
		gemm(true, false, h.Vocab, h.Dim, s.rows, 1, data[float32](dy), h.Vocab, data[float32](s.x), h.Dim, 1, data[float32](h.Table.Grad), h.Dim)
	default:
		gemm(true, false, h.Vocab, h.Dim, s.rows, 1, data[float64](dy), h.Vocab, data[float64](s.x), h.Dim, 1, data[float64](h.Table.Grad), h.Dim)
	}
	s.x = nil
	return nil
}

// Backward runs BackwardInput and then BackwardWeight.
func (h *TiedHead) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return fullBackward(h.BackwardInput, h.BackwardWeight, saved, dy)
}
