package e2e_test

import (
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/generated/fsdpswap"
	"github.com/ppgen/ppgen/generated/gpipe"
	"github.com/ppgen/ppgen/generated/interleaved"
	"github.com/ppgen/ppgen/generated/interleavedoverlap"
	"github.com/ppgen/ppgen/generated/interleavedsplit"
	"github.com/ppgen/ppgen/generated/mpipe"
	"github.com/ppgen/ppgen/generated/onef1b"
	"github.com/ppgen/ppgen/generated/shiplabels"
	"github.com/ppgen/ppgen/generated/zbh1"
	"github.com/ppgen/ppgen/generated/zbv"
	"github.com/ppgen/ppgen/generated/zbvbatch"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/pipe/pipetest"
	"github.com/ppgen/ppgen/runtime/transport"
)

// poisoner wraps a transport: every tensor the Exec recycles is filled
// with NaN before the transport gets it back, so a received tensor used
// after its Recycle (by a stage, a posted send or a later step) turns the
// losses into NaN at once, without waiting for the pool to reuse it.
type poisoner struct {
	transport.Transport
	rec transport.Recycler
	n   *atomic.Int64
}

func (p poisoner) Recycle(t *tensor.Dense) {
	p.n.Add(1)
	for i, s := 0, t.Float32s(); i < len(s); i++ {
		s[i] = float32(math.NaN())
	}
	p.rec.Recycle(t)
}

// ident is a stage that returns its input as its output and its output
// gradient as its input gradient (an identity layer: the received tensors
// escape into y and dx). Its weight step records sums of what it saved and
// got, so reading a recycled tensor shows.
type ident struct{ got []float64 }

func (s *ident) Forward(x *tensor.Dense) (*tensor.Dense, any, error) { return x, x, nil }
func (s *ident) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) {
	return dy, nil
}
func (s *ident) BackwardWeight(saved any, dy *tensor.Dense) error {
	var sx, sd float64
	for _, v := range saved.(*tensor.Dense).Float32s() {
		sx += float64(v)
	}
	for _, v := range dy.Float32s() {
		sd += float64(v)
	}
	s.got = append(s.got, sx, sd)
	return nil
}

// bigData gives float32 micro-batches of 64×80 (20 KiB, pooled by the
// transports).
type bigData struct{ iter int }

func (d *bigData) gen(micro, salt int) *tensor.Dense {
	v := make([]float32, 64*80)
	for i := range v {
		v[i] = float32((d.iter*7+micro*5+i*3+salt)%9-4) / 4
	}
	return tensor.New(tensor.WithShape(64, 80), tensor.WithBacking(v))
}
func (d *bigData) Input(m int) (*tensor.Dense, error)  { return d.gen(m, 0), nil }
func (d *bigData) Target(m int) (*tensor.Dense, error) { return d.gen(m, 1), nil }

// recycleRun trains prog for iters iterations over an in-process or a TCP
// world, with every third stage an identity, and returns what it computed:
// the losses, the affine parameters and the identities' records. With keep
// (Config.KeepReceived) nothing is recycled; otherwise every recycled
// tensor is poisoned, and recycled counts them.
func recycleRun(t *testing.T, sp pipe.Spec, fns []func(*pipe.Exec) error, tcp, keep bool, iters int) (out []float64, recycled int64) {
	t.Helper()
	var n atomic.Int64
	trs := transport.NewInProc(sp.Ranks, transport.InProcTimeout(20*time.Second))
	if tcp {
		trs = pipetest.TCPWorld(t, sp.Ranks, sp.Fingerprint, nil)
	}
	affine := pipetest.NewStages(sp.Stages)
	stages := make([]pipe.Stage, sp.Stages)
	idents := map[int]*ident{}
	for s := range stages {
		if s%3 == 1 {
			idents[s] = &ident{}
			stages[s] = idents[s]
		} else {
			stages[s] = affine[s]
		}
	}
	data := &bigData{}
	xs := make([]*pipe.Exec, sp.Ranks)
	for r := range sp.Ranks {
		mine := map[int]pipe.Stage{}
		for s, rr := range sp.RankOf {
			if rr == r {
				mine[s] = stages[s]
			}
		}
		tr := trs[r]
		if !keep {
			tr = poisoner{tr, tr.(transport.Recycler), &n}
		}
		x, err := pipe.New(pipe.Config{Rank: r, Spec: sp, Stages: mine, Loss: pipetest.MSE{}, Data: data, Transport: tr, KeepReceived: keep,
			OptStep: func() error {
				for s := range mine {
					if a, ok := mine[s].(*pipetest.Affine); ok {
						a.Step()
					}
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		xs[r] = x
	}
	defer func() {
		for r, x := range xs {
			x.Close()
			trs[r].Close()
		}
	}()
	last := sp.RankOf[sp.Stages-1]
	for it := range iters {
		data.iter = it
		if err := pipe.RunAll(xs, fns); err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		out = append(out, xs[last].Losses()...)
	}
	for s := range stages {
		if id := idents[s]; id != nil {
			out = append(out, id.got...)
		} else {
			out = append(out, affine[s].A, affine[s].B)
		}
	}
	return out, n.Load()
}

// TestRecycledReceivesAreDead runs catalog programs (colocated stages,
// split backwards, overlap, owned inputs, shipped labels, swap and FSDP
// steps) with identity stages among affine ones, once keeping every
// received tensor and once recycling them, poisoned: the results must be
// bit for bit the same, so no tensor the runtime recycled was still in use,
// and the runtime must have recycled some.
func TestRecycledReceivesAreDead(t *testing.T) {
	progs := []struct {
		name string
		spec pipe.Spec
		fns  []func(*pipe.Exec) error
		tcp  bool
	}{
		{"gpipe", gpipe.Spec, gpipe.Ranks[:], false},
		{"onef1b", onef1b.Spec, onef1b.Ranks[:], false},
		{"interleaved", interleaved.Spec, interleaved.Ranks[:], false},
		{"interleavedsplit", interleavedsplit.Spec, interleavedsplit.Ranks[:], false},
		{"interleavedoverlap", interleavedoverlap.Spec, interleavedoverlap.Ranks[:], false},
		{"zbh1", zbh1.Spec, zbh1.Ranks[:], false},
		{"zbv", zbv.Spec, zbv.Ranks[:], false},
		{"zbv-batch", zbvbatch.Spec, zbvbatch.Ranks[:], false},
		{"mpipe", mpipe.Spec, mpipe.Ranks[:], false},
		{"shiplabels", shiplabels.Spec, shiplabels.Ranks[:], false},
		{"fsdpswap", fsdpswap.Spec, fsdpswap.Ranks[:], false},
		{"zbv/tcp", zbv.Spec, zbv.Ranks[:], true},
		{"interleavedoverlap/tcp", interleavedoverlap.Spec, interleavedoverlap.Ranks[:], true},
	}
	for _, p := range progs {
		t.Run(p.name, func(t *testing.T) {
			want, _ := recycleRun(t, p.spec, p.fns, p.tcp, true, 2)
			got, n := recycleRun(t, p.spec, p.fns, p.tcp, false, 2)
			if !slices.EqualFunc(got, want, func(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }) {
				t.Errorf("recycling changed the results:\n got %v\nwant %v", got, want)
			}
			if slices.ContainsFunc(want, math.IsNaN) {
				t.Errorf("the run without recycling has NaN results: %v", want)
			}
			if n == 0 {
				t.Error("nothing was recycled")
			}
			t.Logf("%d tensors recycled", n)
		})
	}
}
