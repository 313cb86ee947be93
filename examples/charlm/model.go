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

// The model's layers, as runtime/train numbers them: layer 0 is the
// embedding, layers 1 to Blocks the transformer blocks, layer Blocks+1 the
// head (the RMSNorm and the LM head).

// split returns the layers of each of n stages: the blocks as evenly as
// they go, the embedding on the first stage and the head on the last.
func split(blocks, n int) [][2]int {
	out := make([][2]int, n)
	for s := range out {
		out[s] = [2]int{1 + s*blocks/n, 1 + (s+1)*blocks/n}
	}
	out[0][0], out[n-1][1] = 0, blocks+2
	return out
}

// layers hands out the layers of the model newModel builds, for
// runtime/train's layer factory: each layer once per model (a layer asked
// for again gets a new model's). With a tied head, the embedding declares
// its token table tied and the head holds its own copy of it (same values,
// its own gradient), as it would on another rank: the training programs
// (generated with -tie 0:S-1) sum the two copies' gradients at TIE_GRAD,
// so they stay one parameter.
type layers struct {
	sh   shape
	dt   tensor.Dtype
	seed uint64
	tie  bool
	m    *model
	used map[int]bool
}

func (l *layers) layer(i int) (nn.Layer, error) {
	if l.m == nil || l.used[i] {
		m, err := newModel(l.sh, l.dt, l.seed, l.tie)
		if err != nil {
			return nil, err
		}
		l.m, l.used = m, map[int]bool{}
	}
	l.used[i] = true
	m := l.m
	switch {
	case i < 0 || i > len(m.blocks)+1:
		return nil, fmt.Errorf("no layer %d in a model of %d layers", i, len(m.blocks)+2)
	case i == 0 && m.tied:
		return nn.Tie(m.emb, m.emb.Token)
	case i == 0:
		return m.emb, nil
	case i <= len(m.blocks):
		return m.blocks[i-1], nil
	case !m.tied:
		return nn.NewSequential(m.norm, m.head), nil
	}
	tok := m.emb.Token
	cp := &nn.Param{Name: "head." + tok.Name, Value: tok.Value.Clone().(*tensor.Dense), Grad: tensor.New(tensor.Of(tok.Grad.Dtype()), tensor.WithShape(tok.Grad.Shape()...))}
	h, err := nn.NewTiedHead(cp)
	if err != nil {
		return nil, err
	}
	return nn.Tie(nn.NewSequential(m.norm, h), cp)
}

// seqLayers returns the model's layers as runtime/train numbers them,
// the head's tied table the embedding's own (the sequential reference's).
func (m *model) seqLayers() []nn.Layer {
	out := []nn.Layer{m.emb}
	for _, b := range m.blocks {
		out = append(out, b)
	}
	return append(out, nn.NewSequential(m.norm, m.head))
}
