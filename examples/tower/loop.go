package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/examples/internal/compare"
	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/metrics"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/world"
)

// The -loop model: a raw input of inDim features per row goes through the
// tower (a Linear to width and a GELU), then the body, one layer per
// stage: a Linear and a GELU of width (the first reading inDim features
// without a tower), the last a Linear to outDim, under
// MSE against a fixed function of the input.
const (
	inDim  = 4
	width  = 8
	outDim = 3
	rows   = 2 // per micro-batch
)

// loopOptions are the flags of -loop.
type loopOptions struct {
	owners    string // min or full: the generated program
	tower     string // owner, first, frozen or none
	steps     int
	stopAfter int
	lr, clip  float64
	metrics   string // a JSONL file, or - for stdout
	ckpt      string
	ckptEvery int
	resume    string
	check     bool
}

// validate checks the flags of o, and the combinations runtime/train or
// the reference do not support, each with what to use instead.
func (o loopOptions) validate() error {
	if _, ok := programs[o.owners]; !ok {
		return fmt.Errorf("-owners %q: want min or full", o.owners)
	}
	switch {
	case o.tower != "owner" && o.tower != "first" && o.tower != "frozen" && o.tower != "none":
		return fmt.Errorf("-tower %q: want owner, first, frozen or none", o.tower)
	case o.steps < 1 || o.steps > 100_000:
		return fmt.Errorf("-steps %d: want 1..100000", o.steps)
	case o.stopAfter < 0:
		return fmt.Errorf("-stop-after %d: want 0 or more steps", o.stopAfter)
	case !(o.lr > 0) || o.lr > 10:
		return fmt.Errorf("-lr %v: want a rate in (0, 10]", o.lr)
	case !(o.clip >= 0) || math.IsInf(o.clip, 0):
		return fmt.Errorf("-clip %v: want a finite norm, or 0 for none", o.clip)
	case o.ckptEvery < 0 || (o.ckptEvery > 0 && o.ckpt == ""):
		return fmt.Errorf("-ckpt-every %d: want 0 or more, with -ckpt", o.ckptEvery)
	case o.check && o.resume != "":
		return fmt.Errorf("-check with -resume %s: the reference (train.Reference) trains from step 0 and does not resume; check the job that starts from step 0 (-check -stop-after N), or drop -check", o.resume)
	}
	if o.resume == "" {
		return nil
	}
	m, err := checkpoint.ReadManifest(o.resume)
	if err != nil {
		return fmt.Errorf("-resume: %w", err)
	}
	switch trained := o.tower == "owner" || o.tower == "first"; {
	case m.Layout.Tower && !trained:
		return fmt.Errorf("-resume %s with -tower %s: the checkpoint holds a trained tower (its job ran -tower owner or first) and runtime/train does not drop it or freeze it; resume with -tower owner or -tower first (either reads it)", o.resume, o.tower)
	case !m.Layout.Tower && trained:
		return fmt.Errorf("-resume %s with -tower %s: the checkpoint holds no tower (its job ran -tower frozen or none) and runtime/train does not start a tower mid-job; resume with the -tower of the job that saved it, or train the tower from step 0", o.resume, o.tower)
	}
	return nil
}

// towerLayer builds the tower, the same initial values on every call.
func towerLayer() (*nn.Sequential, error) {
	lin, err := nn.NewLinear(inDim, width, tensor.Float64, nn.NewRand(7))
	if err != nil {
		return nil, err
	}
	return nn.NewSequential(lin, nn.GELU{}), nil
}

// bodyLayer returns the layer factory of a body of n layers reading in
// features (width after a tower, inDim without): layer i is seeded by i.
func bodyLayer(n, in int) func(i int) (nn.Layer, error) {
	return func(i int) (nn.Layer, error) {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("body layer %d of %d", i, n)
		}
		from, out := width, width
		if i == 0 {
			from = in
		}
		if i == n-1 {
			out = outDim
		}
		lin, err := nn.NewLinear(from, out, tensor.Float64, nn.NewRand(uint64(100+i)))
		if err != nil {
			return nil, err
		}
		if i == n-1 {
			return nn.NewSequential(lin), nil
		}
		return nn.NewSequential(lin, nn.GELU{}), nil
	}
}

// replicas is a Config.Tower factory that keeps the replicas it built
// (one per rank), for -check to compare each with the reference's, and
// counts each one's forwards, to show where the tower ran.
type replicas struct {
	mu   sync.Mutex
	made []*counted
}

// counted is a tower replica that counts its forwards.
type counted struct {
	nn.Layer
	forwards atomic.Int64
}

func (c *counted) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	c.forwards.Add(1)
	return c.Layer.Forward(x)
}

func (r *replicas) build() (nn.Layer, error) {
	l, err := towerLayer()
	if err != nil {
		return nil, err
	}
	c := &counted{Layer: l}
	r.mu.Lock()
	r.made = append(r.made, c)
	r.mu.Unlock()
	return c, nil
}

// forwards returns each replica's forwards, most first.
func (r *replicas) forwards() []int64 {
	var n []int64
	for _, c := range r.made {
		n = append(n, c.forwards.Load())
	}
	slices.SortFunc(n, func(a, b int64) int { return cmp.Compare(b, a) })
	return n
}

// loopBatch returns micro-batch m of step: a pure function of both, so
// that a resumed job reads what an uninterrupted one reads.
func loopBatch(step, m int) (x, y *tensor.Dense) {
	rng := nn.NewRand(uint64(1000*step + m + 1))
	xs, ys := make([]float64, rows*inDim), make([]float64, rows*outDim)
	for i := range xs {
		xs[i] = rng.Float64()*2 - 1
	}
	for r := range rows {
		for j := range outDim {
			ys[r*outDim+j] = math.Sin(xs[r*inDim+j] + xs[r*inDim+j+1])
		}
	}
	return tensor.New(tensor.WithShape(rows, inDim), tensor.WithBacking(xs)),
		tensor.New(tensor.WithShape(rows, outDim), tensor.WithBacking(ys))
}

// loopData is Config.Data for micro micro-batches a step; frozen runs
// the tower as a frozen preprocess of each input load (pipe.WithPreprocess:
// on the rank that loads it, the owner under mpipe), a fresh copy per
// source since every rank asks for its own.
func loopData(micro int, frozen bool) func(step, replica int) (pipe.DataSource, error) {
	return func(step, _ int) (pipe.DataSource, error) {
		var b pipe.MicroBatches
		for m := range micro {
			x, y := loopBatch(step, m)
			b.Inputs, b.Targets = append(b.Inputs, x), append(b.Targets, y)
		}
		if !frozen {
			return b, nil
		}
		tw, err := towerLayer()
		if err != nil {
			return nil, err
		}
		return pipe.WithPreprocess(b, func(_ int, x *tensor.Dense) (*tensor.Dense, error) {
			y, saved, err := tw.Forward(x)
			if err != nil {
				return nil, err
			}
			return y, tw.Release(saved)
		}), nil
	}
}

// loopConfig is the runtime/train job of o, but for its metrics and hooks;
// tw builds the tower's replicas when o trains one.
func (o loopOptions) loopConfig(tw *replicas) train.Config {
	prog := programs[o.owners]
	sp := prog.spec
	in := width
	if o.tower == "none" {
		in = inDim
	}
	split := make([][2]int, sp.Stages)
	for s := range split {
		split[s] = [2]int{s, s + 1}
	}
	c := train.Config{
		Train: train.Program{Spec: sp, Ranks: prog.ranks}, Layers: split, Layer: bodyLayer(sp.Stages, in),
		Loss: func(scale float64) pipe.Loss { return nn.MSE{Scale: scale} },
		Data: loopData(sp.Micro, o.tower == "frozen"),
		LR:   nn.CosineDecay{Peak: o.lr, Min: o.lr / 10, Warmup: min(2, o.steps), Total: o.steps},
		Clip: o.clip, Steps: o.steps, StopAfter: o.stopAfter, TokensPerStep: int64(sp.Micro * rows),
		CheckpointDir: o.ckpt, CheckpointEvery: o.ckptEvery, Resume: o.resume,
	}
	if o.tower == "owner" || o.tower == "first" {
		c.Tower, c.TowerAtFirst = tw.build, o.tower == "first"
	}
	return c
}

// loopResult is what trainLoop trained: runtime/train's result and the
// tower replicas of a trained tower (none otherwise).
type loopResult struct {
	res    *train.Result
	towers []nn.Layer
	// forwards are the tower replicas' forwards over the job, most first.
	forwards []int64
}

// trainLoop trains o's job through runtime/train (train.Run) with every
// rank in this process, prints each step's loss, and with -check compares
// the losses, the body's layers and every tower replica with
// train.Reference's.
func trainLoop(o loopOptions, out io.Writer, logger *slog.Logger) (*loopResult, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	tw := &replicas{}
	c := o.loopConfig(tw)
	c.WorldOptions = world.Options{Logger: logger}
	if o.metrics != "" {
		f := os.Stdout
		if o.metrics != "-" {
			var err error
			if f, err = os.Create(o.metrics); err != nil {
				return nil, fmt.Errorf("-metrics: %w", err)
			}
			defer f.Close()
		}
		c.Metrics = f
	}
	c.Hooks.AfterStep = func(rank int, r metrics.Record) error {
		if rank == 0 {
			fmt.Fprintf(out, "step %d loss %.6f\n", r.Step, r.Loss)
		}
		return nil
	}
	sp := c.Train.Spec
	fmt.Fprintf(out, "tower -loop: mpipe (%s ownership, %d of %d micro-batches owned), %d ranks, %d stages, %d micro-batches of %d rows, in-process\n",
		o.owners, sp.Owned, sp.Micro, sp.Ranks, sp.Stages, sp.Micro, rows)
	fmt.Fprintf(out, "model: tower Linear %d→%d + GELU (%s), body %d layers of width %d; AdamW, learning rate %g cosine-decayed to %g, clipping at norm %g\n",
		inDim, width, towerNames[o.tower], sp.Stages, width, o.lr, o.lr/10, o.clip)
	res, err := train.Run(context.Background(), c)
	if err != nil {
		return nil, err
	}
	lr := &loopResult{res: res, forwards: tw.forwards()}
	for _, c := range tw.made {
		lr.towers = append(lr.towers, c.Layer)
	}
	if len(tw.made) > 0 {
		fmt.Fprintf(out, "tower forwards per replica over %d steps, most first: %v\n", len(res.Records), lr.forwards)
	}
	if c.CheckpointDir != "" {
		fmt.Fprintf(out, "checkpoint after step %d in %s\n", res.Start+len(res.Records), c.CheckpointDir)
	}
	if !o.check {
		return lr, nil
	}
	return lr, o.checkLoop(out, lr)
}

// towerNames says what each -tower is, in the header.
var towerNames = map[string]string{
	"owner":  "trainable, Config.Tower: forward and backward on each micro-batch's owner",
	"first":  "trainable, Config.TowerAtFirst: forward and backward on the first stage's rank",
	"frozen": "frozen, pipe.WithPreprocess in Config.Data: forward on each micro-batch's owner",
	"none":   "none: the body reads the raw inputs",
}

// checkLoop trains o's job with train.Reference and compares: the
// losses, the body's layers and every tower replica within 1e-12
// relative (train.Reference's bar in float64).
func (o loopOptions) checkLoop(out io.Writer, got *loopResult) error {
	ref := &replicas{}
	want, err := train.Reference(o.loopConfig(ref))
	if err != nil {
		return err
	}
	if len(got.res.Records) != len(want.Records) {
		return fmt.Errorf("check: %d steps trained, the reference %d", len(got.res.Records), len(want.Records))
	}
	lossDiff := 0.0
	for i, r := range got.res.Records {
		lossDiff = math.Max(lossDiff, compare.RelDiff(r.Loss, want.Records[i].Loss))
	}
	paramDiff, err := compare.Layers(got.res.Layers, want.Layers)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	if len(got.towers) > 0 != (len(ref.made) > 0) {
		return errors.New("check: the job and the reference disagree on the tower")
	}
	for r, l := range got.towers {
		d, err := compare.Params(l.Params(), ref.made[0].Params())
		if err != nil {
			return fmt.Errorf("check: tower replica %d: %w", r, err)
		}
		paramDiff = math.Max(paramDiff, d)
	}
	return compare.Report(out, checkTol, lossDiff, paramDiff)
}

// checkTol is -check's bar in float64, runtime/train's tower tests' own:
// the replicas' tower gradients are summed across the pipeline and the
// gradient norm per rank, an ulp or so from the reference's one sum.
const checkTol = 1e-12
