package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"gorgonia.org/tensor"
)

// The layers of a GPT-style transformer, on the [rows, features] matrices
// every Layer takes: a batch of B sequences of SeqLen tokens is B·SeqLen
// rows, sequence b holding rows b·SeqLen to (b+1)·SeqLen-1 in position
// order. Embedding turns token ids into vectors, RMSNorm normalizes each
// row, CausalAttention mixes the rows of one sequence (each position sees
// itself and the positions before it), Residual adds a layer's input to its
// output; NewSelfAttention, NewMLPBlock and NewTransformerBlock compose
// them with Linear and GELU into a pre-norm block. The last stage's head is
// an RMSNorm and a Linear to the vocabulary, trained with
// SoftmaxCrossEntropy on class-index targets ([rows, 1]).

// Embedding maps token ids to vectors and adds a learned position vector:
// for x [rows, 1] holding token ids (integers in [0, Vocab)),
// y[r] = Token[x[r]] + Position[r mod SeqLen], y [rows, Dim].
type Embedding struct {
	Vocab, Dim, SeqLen int
	Token              *Param // [Vocab, Dim]
	Position           *Param // [SeqLen, Dim]
	dtype              tensor.Dtype
}

type embeddingSaved struct {
	e    *Embedding
	ids  []int32 // nil once BackwardWeight has run
	rows int
}

// NewEmbedding returns an Embedding of dtype dt whose vectors are drawn
// from U(-0.1, 0.1) in float64 from rng (tokens first, then positions).
func NewEmbedding(vocab, dim, seqLen int, dt tensor.Dtype, rng *rand.Rand) (*Embedding, error) {
	if err := newArgs("NewEmbedding", dt, rng, "vocab", vocab, "dim", dim, "seqLen", seqLen); err != nil {
		return nil, err
	}
	tok, pos := newMatrix(dt, vocab, dim), newMatrix(dt, seqLen, dim)
	uniform(tok, 0.1, rng)
	uniform(pos, 0.1, rng)
	return &Embedding{Vocab: vocab, Dim: dim, SeqLen: seqLen, dtype: dt,
		Token:    &Param{Name: "token", Value: tok, Grad: newMatrix(dt, vocab, dim)},
		Position: &Param{Name: "position", Value: pos, Grad: newMatrix(dt, seqLen, dim)},
	}, nil
}

// newArgs checks a constructor's dtype, rng and positive sizes (name, value
// pairs).
func newArgs(where string, dt tensor.Dtype, rng *rand.Rand, sizes ...any) error {
	for i := 0; i+1 < len(sizes); i += 2 {
		if v := sizes[i+1].(int); v <= 0 {
			return fmt.Errorf("nn: %s: %s=%d must be positive", where, sizes[i], v)
		}
	}
	if !checkDtype(dt) {
		return fmt.Errorf("nn: %s: dtype %v, want float32 or float64", where, dt)
	}
	if rng == nil {
		return fmt.Errorf("nn: %s: nil *rand.Rand (use NewRand(seed))", where)
	}
	return nil
}

// uniform fills t with values drawn from U(-a, a) in float64.
func uniform(t *tensor.Dense, a float64, rng *rand.Rand) {
	switch d := t.Data().(type) {
	case []float32:
		for i := range d {
			d[i] = float32(a * (2*rng.Float64() - 1))
		}
	case []float64:
		for i := range d {
			d[i] = a * (2*rng.Float64() - 1)
		}
	}
}

// Params returns the token and the position table.
func (e *Embedding) Params() []*Param { return []*Param{e.Token, e.Position} }

func (e *Embedding) check(where string) error {
	if e == nil || e.dtype.Type == nil {
		return fmt.Errorf("nn: %s: Embedding is not initialized; build it with NewEmbedding", where)
	}
	return checkShapes(where, e.dtype, paramShape{e.Token, tensor.Shape{e.Vocab, e.Dim}}, paramShape{e.Position, tensor.Shape{e.SeqLen, e.Dim}})
}

// paramShape is a parameter and the shape it must have.
type paramShape struct {
	p     *Param
	shape tensor.Shape
}

// checkShapes checks each parameter (checkParam) and that it has its shape
// and dtype dt.
func checkShapes(where string, dt tensor.Dtype, ps ...paramShape) error {
	for _, c := range ps {
		if err := checkParam(where, c.p); err != nil {
			return err
		}
		if !sameShape(c.p.Value.Shape(), c.shape) || c.p.Value.Dtype() != dt {
			return fmt.Errorf("nn: %s: parameter %q is %v %v, want %v %v", where, c.p.Name, c.p.Value.Dtype(), c.p.Value.Shape(), dt, c.shape)
		}
	}
	return nil
}

// Forward looks up each row's token and adds its position's vector.
func (e *Embedding) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	const where = "Embedding.Forward"
	if err := e.check(where); err != nil {
		return nil, nil, err
	}
	x, rows, cols, err := matrix(where, "input", x)
	if err != nil {
		return nil, nil, err
	}
	if cols != 1 {
		return nil, nil, fmt.Errorf("nn: %s: input has shape %v, want (rows, 1) token ids", where, x.Shape())
	}
	if rows%e.SeqLen != 0 {
		return nil, nil, fmt.Errorf("nn: %s: %d rows is not a whole number of sequences of %d tokens", where, rows, e.SeqLen)
	}
	ids := make([]int32, rows)
	for r, v := range f64s(x) {
		if v != math.Trunc(v) || v < 0 || v >= float64(e.Vocab) {
			return nil, nil, fmt.Errorf("nn: %s: row %d holds token id %v, want an integer in [0, %d)", where, r, v, e.Vocab)
		}
		ids[r] = int32(v)
	}
	y := newMatrix(e.dtype, rows, e.Dim)
	switch e.dtype {
	case tensor.Float32:
		embed(data[float32](e.Token.Value), data[float32](e.Position.Value), data[float32](y), ids, e.Dim, e.SeqLen)
	default:
		embed(data[float64](e.Token.Value), data[float64](e.Position.Value), data[float64](y), ids, e.Dim, e.SeqLen)
	}
	return y, &embeddingSaved{e: e, ids: ids, rows: rows}, nil
}

// f64s returns t's values (a float32 or float64 tensor) as float64.
func f64s(t *tensor.Dense) []float64 {
	switch d := t.Data().(type) {
	case []float32:
		out := make([]float64, t.Shape().TotalSize())
		for i := range out {
			out[i] = float64(d[i])
		}
		return out
	default:
		return data[float64](t)
	}
}

func embed[T float](tok, pos, y []T, ids []int32, dim, seqLen int) {
	for r, id := range ids {
		yr, tr, pr := y[r*dim:(r+1)*dim], tok[int(id)*dim:(int(id)+1)*dim], pos[(r%seqLen)*dim:(r%seqLen+1)*dim]
		for j := range yr {
			yr[j] = tr[j] + pr[j]
		}
	}
}

func (e *Embedding) saved(where string, saved any, dy *tensor.Dense) (*embeddingSaved, *tensor.Dense, error) {
	if err := e.check(where); err != nil {
		return nil, nil, err
	}
	s, ok := saved.(*embeddingSaved)
	if !ok || s == nil || s.e != e {
		return nil, nil, fmt.Errorf("nn: %s: saved context is %T, want the one returned by this Embedding's Forward", where, saved)
	}
	dy, err := sameAs(where, dy, e.dtype, s.rows, e.Dim)
	return s, dy, err
}

// sameAs checks an output gradient against the forward output's dtype and
// shape [rows, cols].
func sameAs(where string, dy *tensor.Dense, dt tensor.Dtype, rows, cols int) (*tensor.Dense, error) {
	dy, r, c, err := matrix(where, "output gradient", dy)
	if err != nil {
		return nil, err
	}
	if r != rows || c != cols || dy.Dtype() != dt {
		return nil, fmt.Errorf("nn: %s: output gradient is %v %v, want %v (%d, %d) like the forward output", where, dy.Dtype(), dy.Shape(), dt, rows, cols)
	}
	return dy, nil
}

// BackwardInput returns zeros of the input's shape: token ids have no
// gradient.
func (e *Embedding) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	s, _, err := e.saved("Embedding.BackwardInput", saved, dy)
	if err != nil {
		return nil, err
	}
	return newMatrix(e.dtype, s.rows, 1), nil
}

// BackwardWeight adds each row's dy to its token's and its position's
// gradient, in row order.
func (e *Embedding) BackwardWeight(saved any, dy *tensor.Dense) error {
	const where = "Embedding.BackwardWeight"
	s, dy, err := e.saved(where, saved, dy)
	if err != nil {
		return err
	}
	if s.ids == nil {
		return fmt.Errorf("nn: %s: already called on this saved context", where)
	}
	switch e.dtype {
	case tensor.Float32:
		embedGrad(data[float32](e.Token.Grad), data[float32](e.Position.Grad), data[float32](dy), s.ids, e.Dim, e.SeqLen)
	default:
		embedGrad(data[float64](e.Token.Grad), data[float64](e.Position.Grad), data[float64](dy), s.ids, e.Dim, e.SeqLen)
	}
	s.ids = nil
	return nil
}

func embedGrad[T float](dtok, dpos, dy []T, ids []int32, dim, seqLen int) {
	for r, id := range ids {
		dr := dy[r*dim : (r+1)*dim]
		axpy(1, dr, dtok[int(id)*dim:(int(id)+1)*dim])
		axpy(1, dr, dpos[(r%seqLen)*dim:(r%seqLen+1)*dim])
	}
}

// Backward runs BackwardInput and then BackwardWeight.
func (e *Embedding) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return fullBackward(e.BackwardInput, e.BackwardWeight, saved, dy)
}

// RMSNorm scales each row to unit root mean square and multiplies it by a
// learned gain: y[r,j] = x[r,j] / sqrt(mean_j x[r,j]² + Eps) · Gain[j].
type RMSNorm struct {
	Dim   int
	Eps   float64
	Gain  *Param // [Dim], ones at first
	dtype tensor.Dtype
}

type rmsSaved struct {
	n    *RMSNorm
	x    *tensor.Dense // nil once BackwardWeight has run
	inv  []float64     // per row, 1/sqrt(mean x² + Eps)
	rows int
}

// NewRMSNorm returns an RMSNorm of dtype dt over rows of dim features,
// with Eps 1e-5 and a gain of ones.
func NewRMSNorm(dim int, dt tensor.Dtype) (*RMSNorm, error) {
	if err := newArgs("NewRMSNorm", dt, NewRand(0), "dim", dim); err != nil {
		return nil, err
	}
	g := newVector(dt, dim)
	switch d := g.Data().(type) {
	case []float32:
		for i := range d {
			d[i] = 1
		}
	case []float64:
		for i := range d {
			d[i] = 1
		}
	}
	return &RMSNorm{Dim: dim, Eps: 1e-5, dtype: dt, Gain: &Param{Name: "gain", Value: g, Grad: newVector(dt, dim)}}, nil
}

// Params returns the gain.
func (n *RMSNorm) Params() []*Param { return []*Param{n.Gain} }

func (n *RMSNorm) check(where string) error {
	if n == nil || n.dtype.Type == nil {
		return fmt.Errorf("nn: %s: RMSNorm is not initialized; build it with NewRMSNorm", where)
	}
	if !(n.Eps > 0) {
		return fmt.Errorf("nn: %s: Eps %v, want > 0", where, n.Eps)
	}
	return checkShapes(where, n.dtype, paramShape{n.Gain, tensor.Shape{n.Dim}})
}

// Forward normalizes each row of x [rows, Dim].
func (n *RMSNorm) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	const where = "RMSNorm.Forward"
	if err := n.check(where); err != nil {
		return nil, nil, err
	}
	x, rows, cols, err := matrix(where, "input", x)
	if err != nil {
		return nil, nil, err
	}
	if cols != n.Dim || x.Dtype() != n.dtype {
		return nil, nil, fmt.Errorf("nn: %s: input is %v %v, want %v (rows, %d)", where, x.Dtype(), x.Shape(), n.dtype, n.Dim)
	}
	y, inv := newMatrix(n.dtype, rows, cols), make([]float64, rows)
	switch n.dtype {
	case tensor.Float32:
		rmsForward(data[float32](x), data[float32](n.Gain.Value), data[float32](y), inv, n.Dim, n.Eps)
	default:
		rmsForward(data[float64](x), data[float64](n.Gain.Value), data[float64](y), inv, n.Dim, n.Eps)
	}
	return y, &rmsSaved{n: n, x: x, inv: inv, rows: rows}, nil
}

func rmsForward[T float](x, g, y []T, inv []float64, dim int, eps float64) {
	for r := range inv {
		xr, yr := x[r*dim:(r+1)*dim], y[r*dim:(r+1)*dim]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		inv[r] = 1 / math.Sqrt(ss/float64(dim)+eps)
		for j, v := range xr {
			yr[j] = T(float64(v)*inv[r]) * g[j]
		}
	}
}

func (n *RMSNorm) saved(where string, saved any, dy *tensor.Dense) (*rmsSaved, *tensor.Dense, error) {
	if err := n.check(where); err != nil {
		return nil, nil, err
	}
	s, ok := saved.(*rmsSaved)
	if !ok || s == nil || s.n != n {
		return nil, nil, fmt.Errorf("nn: %s: saved context is %T, want the one returned by this RMSNorm's Forward", where, saved)
	}
	if s.x == nil {
		return nil, nil, fmt.Errorf("nn: %s: saved context was already released by BackwardWeight", where)
	}
	dy, err := sameAs(where, dy, n.dtype, s.rows, n.Dim)
	return s, dy, err
}

// BackwardInput returns dx: for row r with u = x·inv,
// dx = inv·(g⊙dy - u·mean(g⊙dy⊙u)).
func (n *RMSNorm) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	s, dy, err := n.saved("RMSNorm.BackwardInput", saved, dy)
	if err != nil {
		return nil, err
	}
	dx := newMatrix(n.dtype, s.rows, n.Dim)
	switch n.dtype {
	case tensor.Float32:
		rmsBackwardInput(data[float32](s.x), data[float32](n.Gain.Value), data[float32](dy), data[float32](dx), s.inv, n.Dim)
	default:
		rmsBackwardInput(data[float64](s.x), data[float64](n.Gain.Value), data[float64](dy), data[float64](dx), s.inv, n.Dim)
	}
	return dx, nil
}

func rmsBackwardInput[T float](x, g, dy, dx []T, inv []float64, dim int) {
	for r, iv := range inv {
		xr, dr, out := x[r*dim:(r+1)*dim], dy[r*dim:(r+1)*dim], dx[r*dim:(r+1)*dim]
		var m float64 // mean of g⊙dy⊙u
		for j, v := range xr {
			m += float64(g[j]) * float64(dr[j]) * float64(v) * iv
		}
		m /= float64(dim)
		for j, v := range xr {
			out[j] = T(iv * (float64(g[j])*float64(dr[j]) - float64(v)*iv*m))
		}
	}
}

// BackwardWeight adds Σ_r dy[r]⊙u[r] (u = x·inv) to the gain's gradient.
func (n *RMSNorm) BackwardWeight(saved any, dy *tensor.Dense) error {
	s, dy, err := n.saved("RMSNorm.BackwardWeight", saved, dy)
	if err != nil {
		return err
	}
	switch n.dtype {
	case tensor.Float32:
		rmsBackwardWeight(data[float32](s.x), data[float32](dy), data[float32](n.Gain.Grad), s.inv, n.Dim)
	default:
		rmsBackwardWeight(data[float64](s.x), data[float64](dy), data[float64](n.Gain.Grad), s.inv, n.Dim)
	}
	s.x = nil
	return nil
}

func rmsBackwardWeight[T float](x, dy, dg []T, inv []float64, dim int) {
	for r, iv := range inv {
		xr, dr := x[r*dim:(r+1)*dim], dy[r*dim:(r+1)*dim]
		for j, v := range xr {
			dg[j] += T(float64(dr[j]) * float64(v) * iv)
		}
	}
}

// Backward runs BackwardInput and then BackwardWeight.
func (n *RMSNorm) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return fullBackward(n.BackwardInput, n.BackwardWeight, saved, dy)
}

// CausalAttention is the parameter-free core of multi-head causal
// self-attention: its input [rows, 3·d] holds each row's query, key and
// value ([q | k | v], each d wide, head h in columns h·d/Heads to
// (h+1)·d/Heads-1 of each), its output [rows, d] the heads' results side
// by side: for each sequence and head, softmax(q·kᵀ/sqrt(d/Heads)) over the
// positions up to and including the row's own, times v. NewSelfAttention
// puts it between the projections.
type CausalAttention struct {
	Heads, SeqLen int
}

type attnSaved struct {
	a        CausalAttention
	qkv      *tensor.Dense // nil once BackwardWeight has run
	p        any           // []T: the attention weights, [sequences][Heads][SeqLen][SeqLen]; nil once BackwardInput has run (given back)
	rows, d  int
	released bool
}

// Params returns nothing: the projections around it hold the weights.
func (CausalAttention) Params() []*Param { return nil }

func (a CausalAttention) dims(where string, rows, cols int) (d int, err error) {
	switch {
	case a.Heads <= 0 || a.SeqLen <= 0:
		return 0, fmt.Errorf("nn: %s: Heads=%d and SeqLen=%d must be positive", where, a.Heads, a.SeqLen)
	case cols%3 != 0 || (cols/3)%a.Heads != 0:
		return 0, fmt.Errorf("nn: %s: input has %d columns, want 3·d with d a multiple of Heads=%d", where, cols, a.Heads)
	case rows%a.SeqLen != 0:
		return 0, fmt.Errorf("nn: %s: %d rows is not a whole number of sequences of %d tokens", where, rows, a.SeqLen)
	}
	return cols / 3, nil
}

// Forward attends within each sequence of SeqLen rows.
func (a CausalAttention) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	const where = "CausalAttention.Forward"
	x, rows, cols, err := matrix(where, "input", x)
	if err != nil {
		return nil, nil, err
	}
	d, err := a.dims(where, rows, cols)
	if err != nil {
		return nil, nil, err
	}
	y := newMatrix(x.Dtype(), rows, d)
	s := &attnSaved{a: a, qkv: x, rows: rows, d: d}
	switch x.Dtype() {
	case tensor.Float32:
		s.p = attnForward(data[float32](x), data[float32](y), rows/a.SeqLen, a.Heads, a.SeqLen, d)
	default:
		s.p = attnForward(data[float64](x), data[float64](y), rows/a.SeqLen, a.Heads, a.SeqLen, d)
	}
	return y, s, nil
}

func attnForward[T float](qkv, y []T, seqs, heads, t, d int) []T {
	dh := d / heads
	scale := T(1 / math.Sqrt(float64(dh)))
	p := take[T](seqs * heads * t * t)
	eachHead(seqs*heads, func(i int) {
		b, h := i/heads, i%heads
		base := b * t * 3 * d
		q, k, v := qkv[base+h*dh:], qkv[base+d+h*dh:], qkv[base+2*d+h*dh:]
		ph := p[i*t*t : (i+1)*t*t]
		gemm(false, true, t, t, dh, scale, q, 3*d, k, 3*d, 0, ph, t)
		causalSoftmax(ph, t)
		gemm(false, false, t, dh, t, 1, ph, t, v, 3*d, 0, y[b*t*d+h*dh:], d)
	})
	return p
}

// eachHead runs f(0), ..., f(n-1), the (sequence, head) pairs of an
// attention, on up to GOMAXPROCS goroutines. Each pair reads and writes
// only its own columns and weights, and is computed whole by one goroutine,
// so results do not depend on the split; a head's products (t×t) are one
// GEMM block each, which GEMM itself would run on one goroutine.
func eachHead(n int, f func(i int)) {
	w := min(runtime.GOMAXPROCS(0), n)
	if w <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// causalSoftmax turns the scores s [t, t] into weights, row i over columns
// 0..i (the later ones get weight 0), in float64: each exponential is taken
// once, kept in float64 until the division.
func causalSoftmax[T float](s []T, t int) {
	e := take[float64](t)
	defer giveBackSlice(e)
	for i := range t {
		row := s[i*t : (i+1)*t]
		mx := math.Inf(-1)
		for _, v := range row[:i+1] {
			mx = math.Max(mx, float64(v))
		}
		var sum float64
		for j, v := range row[:i+1] {
			e[j] = math.Exp(float64(v) - mx)
			sum += e[j]
		}
		for j := range row[:i+1] {
			row[j] = T(e[j] / sum)
		}
		clear(row[i+1:])
	}
}

func (a CausalAttention) saved(where string, saved any, dy *tensor.Dense) (*attnSaved, *tensor.Dense, error) {
	s, ok := saved.(*attnSaved)
	if !ok || s == nil || s.a != a {
		return nil, nil, fmt.Errorf("nn: %s: saved context is %T, want the one returned by this CausalAttention's Forward", where, saved)
	}
	if s.released {
		return nil, nil, fmt.Errorf("nn: %s: saved context was already released by BackwardWeight", where)
	}
	dy, err := sameAs(where, dy, s.qkv.Dtype(), s.rows, s.d)
	return s, dy, err
}

// BackwardInput returns the gradient of the queries, keys and values,
// [rows, 3·d].
func (a CausalAttention) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	s, dy, err := a.saved("CausalAttention.BackwardInput", saved, dy)
	if err != nil {
		return nil, err
	}
	if s.p == nil {
		return nil, fmt.Errorf("nn: CausalAttention.BackwardInput: already called on this saved context")
	}
	dx := newMatrix(dy.Dtype(), s.rows, 3*s.d)
	switch p := s.p.(type) {
	case []float32:
		attnBackward(data[float32](s.qkv), p, data[float32](dy), data[float32](dx), s.rows/a.SeqLen, a.Heads, a.SeqLen, s.d)
		giveBackSlice(p) // the weights' one reader is done
	case []float64:
		attnBackward(data[float64](s.qkv), p, data[float64](dy), data[float64](dx), s.rows/a.SeqLen, a.Heads, a.SeqLen, s.d)
		giveBackSlice(p)
	}
	s.p = nil
	return dx, nil
}

// attnBackward sets dqkv from dy: per sequence and head, with weights P and
// dO = dy's head columns, dV = Pᵀ·dO, dP = dO·vᵀ,
// dS = P⊙(dP - rowsum(P⊙dP)), dq = dS·k·scale, dk = dSᵀ·q·scale.
func attnBackward[T float](qkv, p, dy, dqkv []T, seqs, heads, t, d int) {
	dh := d / heads
	scale := T(1 / math.Sqrt(float64(dh)))
	eachHead(seqs*heads, func(i int) {
		b, h := i/heads, i%heads
		ds := take[T](t * t)
		defer giveBackSlice(ds)
		base := b * t * 3 * d
		q, k, v := qkv[base+h*dh:], qkv[base+d+h*dh:], qkv[base+2*d+h*dh:]
		ph := p[i*t*t : (i+1)*t*t]
		do := dy[b*t*d+h*dh:]
		gemm(true, false, t, dh, t, 1, ph, t, do, d, 0, dqkv[base+2*d+h*dh:], 3*d)
		gemm(false, true, t, t, dh, 1, do, d, v, 3*d, 0, ds, t)
		for i := range t {
			pr, dr := ph[i*t:(i+1)*t], ds[i*t:(i+1)*t]
			var dot float64
			for j := range i + 1 {
				dot += float64(pr[j]) * float64(dr[j])
			}
			for j := range dr {
				dr[j] = T(float64(pr[j]) * (float64(dr[j]) - dot))
			}
		}
		gemm(false, false, t, dh, t, scale, ds, t, k, 3*d, 0, dqkv[base+h*dh:], 3*d)
		gemm(true, false, t, dh, t, scale, ds, t, q, 3*d, 0, dqkv[base+d+h*dh:], 3*d)
	})
}

// BackwardWeight releases the context: the core has no parameters.
func (a CausalAttention) BackwardWeight(saved any, dy *tensor.Dense) error {
	s, _, err := a.saved("CausalAttention.BackwardWeight", saved, dy)
	if err != nil {
		return err
	}
	s.released, s.qkv, s.p = true, nil, nil
	return nil
}

// Backward runs BackwardInput and then BackwardWeight.
func (a CausalAttention) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return fullBackward(a.BackwardInput, a.BackwardWeight, saved, dy)
}

// Residual is y = x + Inner(x), for an Inner whose output has its input's
// shape.
type Residual struct {
	Inner Layer
}

type residualSaved struct {
	r     *Residual
	inner any
	shape tensor.Shape
	dtype tensor.Dtype
}

// Params returns Inner's parameters.
func (r *Residual) Params() []*Param { return r.Inner.Params() }

// Forward returns x + Inner(x).
func (r *Residual) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	const where = "Residual.Forward"
	if r == nil || r.Inner == nil {
		return nil, nil, fmt.Errorf("nn: %s: nil Inner layer", where)
	}
	x, rows, cols, err := matrix(where, "input", x)
	if err != nil {
		return nil, nil, err
	}
	f, inner, err := r.Inner.Forward(x)
	if err != nil {
		return nil, nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	if !sameShape(f.Shape(), x.Shape()) || f.Dtype() != x.Dtype() {
		return nil, nil, fmt.Errorf("nn: %s: inner layer maps %v %v to %v %v; a residual needs the same shape", where, x.Dtype(), x.Shape(), f.Dtype(), f.Shape())
	}
	y, err := sum2(x, f, rows, cols)
	if err != nil {
		return nil, nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	if ownsResults(r.Inner) && !keepsOutput(r.Inner) {
		giveBack(f) // the inner output: sum2 was its one reader
	}
	return y, &residualSaved{r: r, inner: inner, shape: x.Shape().Clone(), dtype: x.Dtype()}, nil
}

// sum2 returns a + b for two [rows, cols] matrices of one dtype.
func sum2(a, b *tensor.Dense, rows, cols int) (*tensor.Dense, error) {
	b, err := contiguous("Residual", "inner output", b)
	if err != nil {
		return nil, err
	}
	y := newMatrix(a.Dtype(), rows, cols)
	switch a.Dtype() {
	case tensor.Float32:
		add2(data[float32](a), data[float32](b), data[float32](y))
	default:
		add2(data[float64](a), data[float64](b), data[float64](y))
	}
	return y, nil
}

func add2[T float](a, b, y []T) {
	for i := range y {
		y[i] = a[i] + b[i]
	}
}

func (r *Residual) saved(where string, saved any) (*residualSaved, error) {
	s, ok := saved.(*residualSaved)
	if !ok || s == nil || s.r != r {
		return nil, fmt.Errorf("nn: %s: saved context is %T, want the one returned by this Residual's Forward", where, saved)
	}
	return s, nil
}

// BackwardInput returns dy + Inner.BackwardInput(dy).
func (r *Residual) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	const where = "Residual.BackwardInput"
	s, err := r.saved(where, saved)
	if err != nil {
		return nil, err
	}
	dy, err = sameAs(where, dy, s.dtype, s.shape[0], s.shape[1])
	if err != nil {
		return nil, err
	}
	di, err := r.Inner.BackwardInput(s.inner, dy)
	if err != nil {
		return nil, fmt.Errorf("nn: %s: %w", where, err)
	}
	dx, err := sum2(dy, di, s.shape[0], s.shape[1])
	if err == nil && ownsResults(r.Inner) {
		giveBack(di) // the inner layer's input gradient: sum2 was its one reader
	}
	return dx, err
}

// BackwardWeight runs Inner.BackwardWeight with the same dy.
func (r *Residual) BackwardWeight(saved any, dy *tensor.Dense) error {
	const where = "Residual.BackwardWeight"
	s, err := r.saved(where, saved)
	if err != nil {
		return err
	}
	if err := r.Inner.BackwardWeight(s.inner, dy); err != nil {
		return fmt.Errorf("nn: %s: %w", where, err)
	}
	return nil
}

// Backward runs BackwardInput and then BackwardWeight.
func (r *Residual) Backward(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	return fullBackward(r.BackwardInput, r.BackwardWeight, saved, dy)
}

// NewSelfAttention returns causal multi-head self-attention over dim
// features: a Linear to the queries, keys and values (dim → 3·dim), the
// CausalAttention core, and a Linear back (dim → dim).
func NewSelfAttention(dim, heads, seqLen int, dt tensor.Dtype, rng *rand.Rand) (*Sequential, error) {
	if err := newArgs("NewSelfAttention", dt, rng, "dim", dim, "heads", heads, "seqLen", seqLen); err != nil {
		return nil, err
	}
	if dim%heads != 0 {
		return nil, fmt.Errorf("nn: NewSelfAttention: dim=%d is not a multiple of heads=%d", dim, heads)
	}
	qkv, err := NewLinear(dim, 3*dim, dt, rng)
	if err != nil {
		return nil, err
	}
	out, err := NewLinear(dim, dim, dt, rng)
	if err != nil {
		return nil, err
	}
	return NewSequential(qkv, CausalAttention{Heads: heads, SeqLen: seqLen}, out), nil
}

// NewMLPBlock returns Linear(dim → hidden), GELU, Linear(hidden → dim).
func NewMLPBlock(dim, hidden int, dt tensor.Dtype, rng *rand.Rand) (*Sequential, error) {
	up, err := NewLinear(dim, hidden, dt, rng)
	if err != nil {
		return nil, err
	}
	down, err := NewLinear(hidden, dim, dt, rng)
	if err != nil {
		return nil, err
	}
	return NewSequential(up, GELU{}, down), nil
}

// NewTransformerBlock returns a pre-norm transformer block:
// x + SelfAttention(RMSNorm(x)), then h + MLP(RMSNorm(h)).
func NewTransformerBlock(dim, heads, seqLen, hidden int, dt tensor.Dtype, rng *rand.Rand) (*Sequential, error) {
	n1, err := NewRMSNorm(dim, dt)
	if err != nil {
		return nil, err
	}
	attn, err := NewSelfAttention(dim, heads, seqLen, dt, rng)
	if err != nil {
		return nil, err
	}
	n2, err := NewRMSNorm(dim, dt)
	if err != nil {
		return nil, err
	}
	mlp, err := NewMLPBlock(dim, hidden, dt, rng)
	if err != nil {
		return nil, err
	}
	return NewSequential(&Residual{Inner: NewSequential(n1, attn)}, &Residual{Inner: NewSequential(n2, mlp)}), nil
}
