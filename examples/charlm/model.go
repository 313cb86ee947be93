package main

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/nn"
)

// shape is the model's and the batches' size.
type shape struct {
	Dim, Heads, Hidden, Blocks int // width, attention heads, MLP width, transformer blocks
	SeqLen                     int // tokens per sequence
	Batch                      int // sequences per micro-batch
}

// defaultShape is what `go run ./examples/charlm` trains: about 230k
// parameters, 8 micro-batches of 4 sequences of 64 characters a step.
var defaultShape = shape{Dim: 48, Heads: 4, Hidden: 192, Blocks: 8, SeqLen: 64, Batch: 4}

func (s shape) check(stages int) error {
	switch {
	case s.Dim < 1 || s.Dim > 4096:
		return fmt.Errorf("-dim %d; want 1..4096", s.Dim)
	case s.Heads < 1 || s.Dim%s.Heads != 0:
		return fmt.Errorf("-dim %d is not a multiple of %d heads", s.Dim, s.Heads)
	case s.Hidden < 1 || s.Hidden > 16384:
		return fmt.Errorf("MLP width %d; want 1..16384", s.Hidden)
	case s.Blocks < 1 || s.Blocks > 256:
		return fmt.Errorf("-blocks %d; want 1..256", s.Blocks)
	case s.SeqLen < 2 || s.SeqLen > 4096:
		return fmt.Errorf("-seq %d; want 2..4096", s.SeqLen)
	case s.Batch < 1 || s.Batch > 1024:
		return fmt.Errorf("-batch %d; want 1..1024 sequences per micro-batch", s.Batch)
	case s.Blocks < stages:
		return fmt.Errorf("-blocks %d cannot fill the schedule's %d stages; use -blocks %d or more", s.Blocks, stages, stages)
	}
	return nil
}

// model is the character model: an Embedding (token and position tables),
// Blocks pre-norm transformer blocks, an RMSNorm and the head, which is a
// TiedHead on the token table when tied, else a Linear to the vocabulary.
type model struct {
	emb    *nn.Embedding
	blocks []*nn.Sequential
	norm   *nn.RMSNorm
	head   nn.Layer
	tied   bool
}

// newModel builds the model deterministically from seed. A tied head reads
// emb.Token itself: one parameter, as the sequential reference trains it.
func newModel(sh shape, dt tensor.Dtype, seed uint64, tie bool) (*model, error) {
	rng := nn.NewRand(seed)
	m := &model{tied: tie}
	var err error
	if m.emb, err = nn.NewEmbedding(vocab, sh.Dim, sh.SeqLen, dt, rng); err != nil {
		return nil, err
	}
	for range sh.Blocks {
		b, err := nn.NewTransformerBlock(sh.Dim, sh.Heads, sh.SeqLen, sh.Hidden, dt, rng)
		if err != nil {
			return nil, err
		}
		if err := scaleBranches(b, 1/math.Sqrt(2*float64(sh.Blocks))); err != nil {
			return nil, err
		}
		m.blocks = append(m.blocks, b)
	}
	if m.norm, err = nn.NewRMSNorm(sh.Dim, dt); err != nil {
		return nil, err
	}
	if tie {
		m.head, err = nn.NewTiedHead(m.emb.Token)
	} else {
		m.head, err = nn.NewLinear(sh.Dim, vocab, dt, rng)
	}
	return m, err
}

// scaleBranches multiplies the last Linear of each residual branch of a
// transformer block (attention's output projection, the MLP's down
// projection) by f: GPT-2's initialisation, 1/sqrt(2·blocks), which keeps
// the residual stream's scale independent of the depth at the start, so
// that the embedding's signal reaches the head.
func scaleBranches(block *nn.Sequential, f float64) error {
	for i, l := range block.Layers {
		r, ok := l.(*nn.Residual)
		if !ok {
			return fmt.Errorf("transformer block layer %d is a %T, want a residual", i, l)
		}
		inner, ok := r.Inner.(*nn.Sequential)
		if !ok || len(inner.Layers) != 2 {
			return fmt.Errorf("transformer block layer %d holds a %T, want a norm and a branch", i, r.Inner)
		}
		branch, ok := inner.Layers[1].(*nn.Sequential)
		if !ok || len(branch.Layers) == 0 {
			return fmt.Errorf("transformer block layer %d: branch %T, want a Sequential", i, inner.Layers[1])
		}
		lin, ok := branch.Layers[len(branch.Layers)-1].(*nn.Linear)
		if !ok {
			return fmt.Errorf("transformer block layer %d: the branch ends in a %T, want a Linear", i, branch.Layers[len(branch.Layers)-1])
		}
		switch w := lin.Weight.Value.Data().(type) {
		case []float64:
			for j := range w {
				w[j] *= f
			}
		case []float32:
			for j := range w {
				w[j] *= float32(f)
			}
		}
	}
	return nil
}

// params returns the model's parameters in order, each once (a tied
// table is the embedding's).
func (m *model) params() []*nn.Param {
	ps := m.emb.Params()
	for _, b := range m.blocks {
		ps = append(ps, b.Params()...)
	}
	ps = append(ps, m.norm.Params()...)
	if !m.tied {
		ps = append(ps, m.head.Params()...)
	}
	return ps
}

// stage is one pipeline stage: a Sequential of the model's layers, and the
// tied table's copy it holds (the first stage's token table, the last
// stage's head), if any.
type stage struct {
	*nn.Sequential
	tied []*nn.Param
}

// TiedGrads returns the gradients of the tied copies this stage holds:
// runtime/pipe's Tied interface, through which the training programs
// (generated with `ppgen gen -tie 0:S-1`) sum the first and the last
// stage's gradients at TIE_GRAD, before OPT_STEP: locally on zbv's rank 0,
// which holds both, across ranks 0 and 3 on 1f1b. Untied (-tie=false),
// both stages return none and the exchange sums nothing.
func (s *stage) TiedGrads() []*tensor.Dense {
	gs := make([]*tensor.Dense, len(s.tied))
	for i, p := range s.tied {
		gs[i] = p.Grad
	}
	return gs
}

// cut splits the model into n stages: the blocks as evenly as they go,
// the embedding before the first stage's and the norm and head after the
// last stage's. A tied head gets its own copy of the token table (same
// values, its own gradient), as it would on another rank: the pipeline
// keeps the two copies one parameter by summing their gradients.
func (m *model) cut(n int) ([]*stage, error) {
	if n < 2 || len(m.blocks) < n {
		return nil, fmt.Errorf("%d blocks cannot fill %d stages; want 2 stages or more and -blocks %d or more", len(m.blocks), n, max(n, 2))
	}
	head := m.head
	var headCopy *nn.Param
	if m.tied {
		tok := m.emb.Token
		headCopy = &nn.Param{Name: "head." + tok.Name, Value: tok.Value.Clone().(*tensor.Dense), Grad: tensor.New(tensor.Of(tok.Grad.Dtype()), tensor.WithShape(tok.Grad.Shape()...))}
		h, err := nn.NewTiedHead(headCopy)
		if err != nil {
			return nil, err
		}
		head = h
	}
	stages := make([]*stage, n)
	for s := range stages {
		var layers []nn.Layer
		if s == 0 {
			layers = append(layers, m.emb)
		}
		for b := s * len(m.blocks) / n; b < (s+1)*len(m.blocks)/n; b++ {
			layers = append(layers, m.blocks[b])
		}
		if s == n-1 {
			layers = append(layers, m.norm, head)
		}
		stages[s] = &stage{Sequential: nn.NewSequential(layers...)}
	}
	if m.tied {
		stages[0].tied = append(stages[0].tied, m.emb.Token)
		stages[n-1].tied = append(stages[n-1].tied, headCopy)
	}
	return stages, nil
}

// pipeParams returns the parameters of the given stages in order.
func pipeParams(stages []*stage) []*nn.Param {
	var ps []*nn.Param
	for _, s := range stages {
		ps = append(ps, s.Params()...)
	}
	return ps
}
