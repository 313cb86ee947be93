package e2e_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// Several tensors per boundary: every stage takes and returns the set
// (hidden [L, W] float64, mask [L] float32), whose row count L changes from
// one micro-batch to the next, through pipe.Multi; the pipelined runs must
// equal a sequential run of the same blocks on the sets themselves, with
// no packing and no pipeline.

const multiWidth = 6

// maskedBlock is a MultiStage: y = tanh(Linear(h)) with the rows whose
// mask is 0 zeroed; the mask passes through and has no gradient. It is a
// Swapper too (counting its offloads), so swap programs reach it through
// the adapter.
type maskedBlock struct {
	seq      *nn.Sequential
	offloads atomic.Int64
}

type blockSaved struct {
	inner any
	mask  *tensor.Dense
}

type blockBox struct{ saved *blockSaved }

func newMaskedBlocks(n int) []*maskedBlock {
	out := make([]*maskedBlock, n)
	for s := range out {
		l, err := nn.NewLinear(multiWidth, multiWidth, tensor.Float64, nn.NewRand(uint64(40+s)))
		if err != nil {
			panic(err)
		}
		out[s] = &maskedBlock{seq: nn.NewSequential(l, nn.Tanh{})}
	}
	return out
}

// maskRows returns h with row i scaled by mask[i] (0 or 1).
func maskRows(h, mask *tensor.Dense) (*tensor.Dense, error) {
	if h.Dims() != 2 || mask.Dims() != 1 || h.Shape()[0] != mask.Shape()[0] {
		return nil, fmt.Errorf("hidden %v and mask %v: want [L, W] and [L]", h.Shape(), mask.Shape())
	}
	rows, cols := h.Shape()[0], h.Shape()[1]
	v, m := h.Float64s(), mask.Float32s()
	out := make([]float64, rows*cols)
	for i := range rows {
		for j := range cols {
			out[i*cols+j] = v[i*cols+j] * float64(m[i])
		}
	}
	return tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(out)), nil
}

func (b *maskedBlock) Forward(xs []*tensor.Dense) ([]*tensor.Dense, any, error) {
	if len(xs) != 2 || xs[0] == nil || xs[1] == nil {
		return nil, nil, fmt.Errorf("want (hidden, mask), got %d tensors", len(xs))
	}
	z, saved, err := b.seq.Forward(xs[0])
	if err != nil {
		return nil, nil, err
	}
	y, err := maskRows(z, xs[1])
	if err != nil {
		return nil, nil, err
	}
	return []*tensor.Dense{y, xs[1]}, &blockSaved{saved, xs[1]}, nil
}

func (b *maskedBlock) grad(saved any, dys []*tensor.Dense) (*blockSaved, *tensor.Dense, error) {
	s, ok := saved.(*blockSaved)
	if !ok {
		return nil, nil, fmt.Errorf("context is a %T", saved)
	}
	if len(dys) != 2 || dys[0] == nil || dys[1] != nil {
		return nil, nil, fmt.Errorf("want gradients (dhidden, nil), got %v", dys)
	}
	dz, err := maskRows(dys[0], s.mask)
	return s, dz, err
}

func (b *maskedBlock) BackwardInput(saved any, dys []*tensor.Dense) ([]*tensor.Dense, error) {
	s, dz, err := b.grad(saved, dys)
	if err != nil {
		return nil, err
	}
	dh, err := b.seq.BackwardInput(s.inner, dz)
	if err != nil {
		return nil, err
	}
	return []*tensor.Dense{dh, nil}, nil // the mask has no gradient
}

func (b *maskedBlock) BackwardWeight(saved any, dys []*tensor.Dense) error {
	s, dz, err := b.grad(saved, dys)
	if err != nil {
		return err
	}
	return b.seq.BackwardWeight(s.inner, dz)
}

func (b *maskedBlock) Offload(saved any) (any, error) {
	s, ok := saved.(*blockSaved)
	if !ok {
		return nil, fmt.Errorf("Offload: context is a %T, not the block's", saved)
	}
	b.offloads.Add(1)
	return blockBox{s}, nil
}

func (b *maskedBlock) Load(h any) (any, error) {
	x, ok := h.(blockBox)
	if !ok {
		return nil, fmt.Errorf("Load: handle is a %T, not the block's", h)
	}
	return x.saved, nil
}

// maskedMSE is the MultiLoss: nn.MSE of the hidden part against the
// target (whose masked rows are 0); the mask gets no gradient.
type maskedMSE struct{ micro int }

func (l maskedMSE) Loss(ys []*tensor.Dense, target *tensor.Dense) (float64, []*tensor.Dense, error) {
	if len(ys) != 2 {
		return 0, nil, fmt.Errorf("loss: want (hidden, mask), got %d tensors", len(ys))
	}
	loss, dy, err := nn.MSE{Scale: 1 / float64(l.micro)}.Loss(ys[0], target)
	return loss, []*tensor.Dense{dy, nil}, err
}

// multiRows is micro-batch m's row count in iteration it: 1 to 5, so the
// shapes change from one micro-batch to the next.
func multiRows(m, it int) int { return 1 + (3*m+it)%5 }

// multiSet is micro-batch m of iteration it: the input set (hidden, mask)
// and the target.
func multiSet(m, it int) ([]*tensor.Dense, *tensor.Dense) {
	L := multiRows(m, it)
	h := make([]float64, L*multiWidth)
	tg := make([]float64, L*multiWidth)
	mask := make([]float32, L)
	for i := range L {
		if (i+m+it)%3 != 0 || L == 1 {
			mask[i] = 1
		}
		for j := range multiWidth {
			k := i*multiWidth + j
			h[k] = math.Sin(float64(1 + k + 7*m + 31*it))
			tg[k] = 0.5 * math.Cos(float64(2*k+m+it)) * float64(mask[i])
		}
	}
	return []*tensor.Dense{
			tensor.New(tensor.WithShape(L, multiWidth), tensor.WithBacking(h)),
			tensor.New(tensor.WithShape(L), tensor.WithBacking(mask)),
		},
		tensor.New(tensor.WithShape(L, multiWidth), tensor.WithBacking(tg))
}

// multiSource is the pipeline's DataSource: the current iteration's sets,
// packed.
type multiSource struct{ it *int }

func (s multiSource) Input(m int) (*tensor.Dense, error) {
	in, _ := multiSet(m, *s.it)
	return pipe.Pack(in)
}

func (s multiSource) Target(m int) (*tensor.Dense, error) {
	_, tg := multiSet(m, *s.it)
	return tg, nil
}

// multiSequential trains blocks for iters iterations of micro
// micro-batches without a pipeline (iters 1 and forwardOnly: the losses of
// one evaluation) and returns the losses.
func multiSequential(t testing.TB, blocks []*maskedBlock, micro, iters int, forwardOnly bool) [][]float64 {
	t.Helper()
	loss := maskedMSE{micro}
	opt := &nn.SGD{LR: 0.1}
	var ps []*nn.Param
	for _, b := range blocks {
		ps = append(ps, b.seq.Params()...)
	}
	var out [][]float64
	for it := range iters {
		ls := make([]float64, micro)
		for m := range micro {
			xs, tg := multiSet(m, it)
			saved := make([]any, len(blocks))
			for s, b := range blocks {
				var err error
				if xs, saved[s], err = b.Forward(xs); err != nil {
					t.Fatal(err)
				}
			}
			l, dys, err := loss.Loss(xs, tg)
			if err != nil {
				t.Fatal(err)
			}
			ls[m] = l
			if forwardOnly {
				continue
			}
			for s := len(blocks) - 1; s >= 0; s-- {
				dxs, err := blocks[s].BackwardInput(saved[s], dys)
				if err == nil {
					err = blocks[s].BackwardWeight(saved[s], dys)
				}
				if err != nil {
					t.Fatal(err)
				}
				dys = dxs
			}
		}
		if !forwardOnly {
			if err := opt.Step(ps); err != nil {
				t.Fatal(err)
			}
			nn.ZeroGrad(ps)
		}
		out = append(out, ls)
	}
	return out
}

// countingTransport counts the activations and gradients a rank sends and
// checks that each is one carrier of a set.
type countingTransport struct {
	transport.Transport
	sends *atomic.Int64
	bad   *atomic.Value // the first send that was not a carrier
}

func (c countingTransport) Send(peer int, ch abi.Channel, tag transport.Tag, t *tensor.Dense) error {
	if ch == abi.ActChannel || ch == abi.GradChannel {
		c.sends.Add(1)
		if set, err := pipe.Unpack(t); err != nil || len(set) != 2 {
			c.bad.CompareAndSwap(nil, fmt.Errorf("send %s to rank %d: %d parts, %v", ch, peer, len(set), err))
		}
	}
	return c.Transport.Send(peer, ch, tag, t)
}

// Recycle passes the received tensors back, so recycling runs too.
func (c countingTransport) Recycle(t *tensor.Dense) {
	if r, ok := c.Transport.(transport.Recycler); ok {
		r.Recycle(t)
	}
}

// multiRun is one world (or one rank of it, over MPI) training the masked
// blocks with p: blocks are every stage's, the ranks' execs build theirs.
type multiRun struct {
	p      prog
	blocks []*maskedBlock
	it     int
	sends  atomic.Int64 // activation and gradient messages sent
	bad    atomic.Value // the first of them that was not a carrier
}

func newMultiRun(p prog) *multiRun { return &multiRun{p: p, blocks: newMaskedBlocks(p.spec.Stages)} }

// iters is how many iterations a check runs: one evaluation for a
// forward-only program.
func (g *multiRun) iters() int {
	if g.p.spec.ForwardOnly {
		return 1
	}
	return 3
}

// exec builds rank r's Exec over tr, counting its sends.
func (g *multiRun) exec(t *testing.T, r int, tr transport.Transport) *pipe.Exec {
	t.Helper()
	sp := g.p.spec
	mine := map[int]pipe.Stage{}
	var ps []*nn.Param
	for s, rr := range sp.RankOf {
		if rr == r {
			mine[s] = pipe.Multi(g.blocks[s])
			ps = append(ps, g.blocks[s].seq.Params()...)
		}
	}
	opt := &nn.SGD{LR: 0.1}
	cfg := pipe.Config{Rank: r, Spec: sp, Stages: mine, Data: multiSource{&g.it}, Loss: pipe.MultiLossOf(maskedMSE{sp.Micro}),
		Transport: countingTransport{tr, &g.sends, &g.bad}}
	if !sp.ForwardOnly {
		cfg.OptStep = func() error {
			if err := opt.Step(ps); err != nil {
				return err
			}
			nn.ZeroGrad(ps)
			return nil
		}
	}
	x, err := pipe.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// check compares the run with multiSequential: the losses (got, nil on a
// rank without the last stage), the parameters of the stages on the ranks
// in ranks, and the messages those ranks sent.
func (g *multiRun) check(t *testing.T, got [][]float64, ranks ...int) {
	t.Helper()
	sp := g.p.spec
	if e, _ := g.bad.Load().(error); e != nil {
		t.Fatalf("a transfer was not one carrier of the set: %v", e)
	}
	if want := multiCrossings(sp, ranks) * int64(g.iters()); g.sends.Load() != want {
		t.Errorf("ranks %v sent %d activation and gradient messages, want %d: one per transfer", ranks, g.sends.Load(), want)
	}
	ref := newMaskedBlocks(sp.Stages)
	want := multiSequential(t, ref, sp.Micro, g.iters(), sp.ForwardOnly)
	const tol = 1e-12
	worst, exact := 0.0, true
	for i := range got {
		for m := range want[i] {
			worst = max(worst, relErr(got[i][m], want[i][m]))
			exact = exact && got[i][m] == want[i][m]
		}
	}
	if worst > tol {
		t.Errorf("losses differ from the sequential run by %.3g relative (tolerance %g):\n got %v\nwant %v", worst, tol, got, want)
	}
	for s, r := range sp.RankOf {
		if !slices.Contains(ranks, r) {
			continue
		}
		a, b := g.blocks[s].seq.Params(), ref[s].seq.Params()
		for i := range a {
			x, y := a[i].Value.Float64s(), b[i].Value.Float64s()
			if e := normErr(x, y); e > tol {
				t.Errorf("stage %d parameter %d differs from the sequential run by %.3g", s, i, e)
			}
			for k := range x {
				exact = exact && x[k] == y[k]
			}
		}
	}
	if !exact {
		t.Logf("%s: within %g of the sequential run, not bit-identical", g.p.name, tol)
	}
}

// multiCrossings is the number of messages the ranks in ranks must send in
// one iteration: one per micro-batch per boundary between stages on
// different ranks, forwards from the lower stage's rank and backwards from
// the upper's (forwards only for a forward-only program).
func multiCrossings(sp pipe.Spec, ranks []int) int64 {
	n := 0
	for s := range sp.Stages - 1 {
		a, b := sp.RankOf[s], sp.RankOf[s+1]
		if a == b {
			continue
		}
		if slices.Contains(ranks, a) {
			n++
		}
		if slices.Contains(ranks, b) && !sp.ForwardOnly {
			n++
		}
	}
	return int64(n * sp.Micro)
}

// checkMulti trains (or evaluates) p on the masked blocks over trs, all
// ranks in this process, and compares it with multiSequential.
func checkMulti(t *testing.T, p prog, trs []transport.Transport, mode string) {
	t.Helper()
	sp := p.spec
	g := newMultiRun(p)
	xs := make([]*pipe.Exec, sp.Ranks)
	all := make([]int, sp.Ranks)
	for r := range sp.Ranks {
		x := g.exec(t, r, trs[r])
		xs[r], all[r] = x, r
		t.Cleanup(func() { x.Close(); trs[r].Close() })
	}
	fns := rankFns(p, mode)
	last := sp.RankOf[sp.Stages-1]
	var got [][]float64
	for g.it = range g.iters() {
		if err := pipe.RunAll(xs, fns); err != nil {
			t.Fatalf("iteration %d: %v", g.it, err)
		}
		got = append(got, xs[last].Losses())
	}
	g.check(t, got, all...)
}

// multiCases are the programs the in-process test runs: generated code
// (straight) and tables, split backwards on the V placement (W reuses I's
// gradient set), interleaved with remote neighbours, swap (the block's
// Swapper through the adapter), shipped labels, overlap steps (dualpipev)
// and a forward-only program.
func multiCases(t *testing.T) []struct {
	p    prog
	mode string
} {
	lower := func(cfg ir.Config, po passes.Options) prog { return lowered(t, cfg, gen.Options{Passes: po}) }
	return []struct {
		p    prog
		mode string
	}{
		{progByName(t, "onef1b"), "straight"},
		{progByName(t, "zbv"), "straight"},
		{progByName(t, "interleaved"), "interp"},
		{lower(ir.Config{Schedule: "1f1b", Ranks: 2, Micro: 4}, passes.Options{Swap: 2}), "interp"},
		{lower(ir.Config{Schedule: "zbv", Ranks: 2, Micro: 4}, passes.Options{Swap: 2}), "interp"},
		{lower(ir.Config{Schedule: "1f1b", Ranks: 3, Micro: 6}, passes.Options{ShipLabels: true}), "interp"},
		{lower(ir.Config{Schedule: "dualpipev", Ranks: 4, Micro: 8}, passes.Options{}), "interp"},
		{lower(ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8}, passes.Options{ForwardOnly: true}), "interp"},
	}
}

// TestMultiTensorMatchesSequential runs every case in-process.
func TestMultiTensorMatchesSequential(t *testing.T) {
	for _, c := range multiCases(t) {
		name := c.p.name + "-" + c.mode
		if c.p.opt.Passes.Swap > 0 {
			name += "-swap"
		}
		if c.p.spec.ShipLabels {
			name += "-shiplabels"
		}
		if c.p.spec.ForwardOnly {
			name += "-forwardonly"
		}
		t.Run(name, func(t *testing.T) {
			checkMulti(t, c.p, inprocWorld(c.p.spec.Ranks, 20*time.Second), c.mode)
		})
	}
}

// TestMultiTensorSwapReachesStage: in the swap program the blocks' own
// Offload runs (through the adapter), once per swapped chunk.
func TestMultiTensorSwapReachesStage(t *testing.T) {
	p := lowered(t, ir.Config{Schedule: "1f1b", Ranks: 2, Micro: 4}, gen.Options{Passes: passes.Options{Swap: 2}})
	want := 0
	for _, ops := range p.ops {
		for _, op := range ops {
			if op.Kind == pipe.OpSwapLaunchOffload {
				want++
			}
		}
	}
	if want == 0 {
		t.Fatal("the swap program has no SWAP_LAUNCH_OFFLOAD")
	}
	sp := p.spec
	trs := inprocWorld(sp.Ranks, 20*time.Second)
	g := newMultiRun(p)
	xs := make([]*pipe.Exec, sp.Ranks)
	for r := range sp.Ranks {
		x := g.exec(t, r, trs[r])
		xs[r] = x
		defer func() { x.Close(); trs[r].Close() }()
	}
	if err := pipe.RunAll(xs, rankFns(p, "interp")); err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, b := range g.blocks {
		got += int(b.offloads.Load())
	}
	if got != want {
		t.Errorf("the blocks' Offload ran %d times, want %d (one per SWAP_LAUNCH_OFFLOAD)", got, want)
	}
}

// TestMultiTensorOverTCP runs generated code over TCP: the sets of
// varying shapes cross the sockets as one message per transfer.
func TestMultiTensorOverTCP(t *testing.T) {
	for _, name := range []string{"onef1b", "zbv"} {
		p := progByName(t, name)
		t.Run(name, func(t *testing.T) {
			checkMulti(t, p, tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil), "straight")
		})
	}
}

// TestMultiTensorBadSet: a stage handed a plain tensor (a DataSource that
// forgot to Pack) fails its rank with an error that says so, and no rank
// hangs.
func TestMultiTensorBadSet(t *testing.T) {
	p := progByName(t, "onef1b")
	sp := p.spec
	trs := inprocWorld(sp.Ranks, time.Minute) // no rank may end in it
	blocks := newMaskedBlocks(sp.Stages)
	xs := make([]*pipe.Exec, sp.Ranks)
	plain := pipe.MicroBatches{}
	for m := range sp.Micro {
		in, tg := multiSet(m, 0)
		plain.Inputs = append(plain.Inputs, in[0])
		plain.Targets = append(plain.Targets, tg)
	}
	for r := range sp.Ranks {
		mine := map[int]pipe.Stage{}
		for s, rr := range sp.RankOf {
			if rr == r {
				mine[s] = pipe.Multi(blocks[s])
			}
		}
		x, err := pipe.New(pipe.Config{Rank: r, Spec: sp, Stages: mine, Data: plain, Loss: pipe.MultiLossOf(maskedMSE{sp.Micro}), Transport: trs[r]})
		if err != nil {
			t.Fatal(err)
		}
		xs[r] = x
		defer func() { x.Close(); trs[r].Close() }()
	}
	pipe.RunAll(xs, rankFns(p, "straight"))
	if err := xs[0].Err(); !errors.Is(err, pipe.ErrNotCarrier) {
		t.Errorf("rank 0: %v; want an error wrapping pipe.ErrNotCarrier", err)
	}
	for r, x := range xs {
		if errors.Is(x.Err(), transport.ErrTimeout) {
			t.Errorf("rank %d: %v; want the failure spread by rank 0's abort, not a timeout", r, x.Err())
		}
	}
}
