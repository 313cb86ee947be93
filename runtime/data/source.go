package data

import (
	"fmt"

	"gorgonia.org/tensor"
)

// Source is a runtime/pipe DataSource (Input and Target by micro-batch)
// over one step's tokens: micro-batch m's input is its Batch windows'
// first SeqLen tokens and its target their last SeqLen, each a
// [Batch·SeqLen, 1] column of token ids (float64 or float32), the form
// runtime/nn's SoftmaxCrossEntropy and embedding read (float32 holds ids
// below 2^24 exactly; Set refuses larger ones). Set it to each
// step's [Step] before the step runs (the pipeline reads its DATA_LOAD
// inputs from it during the step).
type Source struct {
	dt              tensor.Dtype
	seqLen          int
	inputs, targets []*tensor.Dense
}

// NewSource returns a Source of dtype dt (Float64 or Float32) for windows
// of seqLen+1 tokens.
func NewSource(dt tensor.Dtype, seqLen int) (*Source, error) {
	if dt != tensor.Float64 && dt != tensor.Float32 {
		return nil, fmt.Errorf("data: source dtype %v; want float64 or float32", dt)
	}
	if seqLen < 1 {
		return nil, fmt.Errorf("data: source sequence length %d; want at least 1", seqLen)
	}
	return &Source{dt: dt, seqLen: seqLen}, nil
}

// Set makes st's tokens the micro-batches.
func (s *Source) Set(st *Step) error {
	L := s.seqLen + 1
	s.inputs, s.targets = s.inputs[:0], s.targets[:0]
	for m, toks := range st.Tokens {
		if len(toks)%L != 0 || len(toks) == 0 {
			return fmt.Errorf("data: step %d, micro-batch %d holds %d tokens, not whole windows of %d", st.Step, m, len(toks), L)
		}
		if s.dt == tensor.Float32 {
			for i, t := range toks {
				if t >= 1<<24 {
					return fmt.Errorf("data: step %d, micro-batch %d: token %d at %d is not exact in float32 (ids below 2^24 are)", st.Step, m, t, i)
				}
			}
		}
		rows := len(toks) / L * s.seqLen
		x, y := make([]float64, 0, rows), make([]float64, 0, rows)
		for w := 0; w < len(toks); w += L {
			for j := range s.seqLen {
				x = append(x, float64(toks[w+j]))
				y = append(y, float64(toks[w+j+1]))
			}
		}
		s.inputs, s.targets = append(s.inputs, s.column(x)), append(s.targets, s.column(y))
	}
	return nil
}

func (s *Source) column(v []float64) *tensor.Dense {
	if s.dt == tensor.Float32 {
		w := make([]float32, len(v))
		for i, x := range v {
			w[i] = float32(x)
		}
		return tensor.New(tensor.WithShape(len(v), 1), tensor.WithBacking(w))
	}
	return tensor.New(tensor.WithShape(len(v), 1), tensor.WithBacking(v))
}

// Input returns micro-batch m's input column.
func (s *Source) Input(m int) (*tensor.Dense, error) {
	if m < 0 || m >= len(s.inputs) {
		return nil, fmt.Errorf("data: no input for micro-batch %d (the step set holds %d)", m, len(s.inputs))
	}
	return s.inputs[m], nil
}

// Target returns micro-batch m's target column.
func (s *Source) Target(m int) (*tensor.Dense, error) {
	if m < 0 || m >= len(s.targets) {
		return nil, fmt.Errorf("data: no target for micro-batch %d (the step set holds %d)", m, len(s.targets))
	}
	return s.targets[m], nil
}
