// Command tower trains a multimodal-shaped model, a tower plus a body,
// under mpipe (docs/schedules.md, "mpipe"): the tower (the preprocess) runs
// on each micro-batch's owner rank, which ships its output to the body's
// first stage, and the body is an 8-stage pipeline on 4 ranks (P=4, M=8,
// V=2). It runs the ranks in this process, in one of two ways.
//
// With -loop it trains through the training loop, runtime/train
// (loop.go), as a trainer would: a tower of runtime/nn layers (a Linear
// and a GELU) in train.Config.Tower, a body of runtime/nn layers (one per
// stage) that the loop splits over the program's stages, AdamW, clipping
// by the global gradient norm, a cosine learning-rate schedule, metrics
// and checkpoints; -check compares with train.Reference.
//
//	go run ./examples/tower -loop -check                  # owner backward, min ownership
//	go run ./examples/tower -loop -tower first -check     # Config.TowerAtFirst: the tower on the first stage's rank
//	go run ./examples/tower -loop -tower frozen -check    # a frozen tower: pipe.WithPreprocess in Config.Data
//	go run ./examples/tower -loop -owners full -metrics m.jsonl -ckpt ck -ckpt-every 2 -stop-after 4
//	go run ./examples/tower -loop -owners full -resume ck  # the last 4 of the 8 steps
//
// -tower owner|first|frozen|none picks the tower; -owners min|full the
// generated program (generated/mpipe, or full_gen.go: every micro-batch
// owned); -steps, -stop-after, -lr, -clip, -metrics FILE, -ckpt DIR,
// -ckpt-every N and -resume DIR are runtime/train's. A checkpoint resumes
// under either -owners and either trained tower (owner, first); what
// runtime/train or its reference do not do is refused, naming what to use
// instead: a checkpoint whose job trained the tower resumed with it frozen
// or absent (the loop does not drop or freeze a trained tower), one without
// a trained tower resumed with one, and -check with -resume (the reference
// trains from step 0).
//
// Without -loop it drives runtime/pipe directly, the low-level wiring: the
// model is elementwise affine maps (y = a·x + b) with its own optimizer,
// the body's stages in pipe.Config.Stages, the tower in pipe.Config.Tower
// (one replica per rank) or in the DataSource (pipe.WithPreprocess), and
// each rank's DataSource serving the micro-batches it owns. It prints, per
// rank, the micro-batches whose inputs it loaded, and with -check compares
// the losses and parameters with a sequential run.
//
//	go run ./examples/tower                          # min ownership, trainable tower with owner backward
//	go run ./examples/tower -owners full -check      # every micro-batch owned
//	go run ./examples/tower -tower frozen -check     # frozen tower (pipe.WithPreprocess)
//	go run ./examples/tower -tower first -check      # trainable, without owner backward (Config.TowerAtFirst)
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/generated/mpipe"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

//go:generate go tool ppgen gen -schedule mpipe -ranks 4 -micro 8 -virtual 2 -mpipe-owners full -name Full -table -o full_gen.go

// program is one generated schedule.
type program struct {
	spec  pipe.Spec
	ranks []func(*pipe.Exec) error
}

var programs = map[string]program{
	"min":  {mpipe.Spec, mpipe.Ranks[:]},
	"full": {FullSpec, FullRanks[:]},
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := cli(os.Args[1:], os.Stdout, logger); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "tower:", err)
		os.Exit(1)
	}
}

// loopOnly are the flags of -loop's runtime/train job.
var loopOnly = []string{"steps", "stop-after", "lr", "clip", "metrics", "ckpt", "ckpt-every", "resume"}

// cli parses args and runs the runtime/pipe path (run) or, with -loop,
// the runtime/train job (trainLoop).
func cli(args []string, out io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("tower", flag.ContinueOnError)
	loop := fs.Bool("loop", false, "train through runtime/train (train.Run) a tower and a body of runtime/nn layers with AdamW, clipping, an LR schedule, metrics and checkpoints, instead of driving runtime/pipe directly")
	owners := fs.String("owners", "min", "ownership mode of the generated program: min or full")
	towerKind := fs.String("tower", "owner", "the tower: owner (trainable, owner backward), first (trainable, its backward on the first stage's rank), frozen or none")
	iters := fs.Int("iters", 3, "iterations (without -loop)")
	check := fs.Bool("check", false, "compare the losses and parameters with a sequential run (with -loop: train.Reference)")
	o := loopOptions{steps: 8, lr: 0.01, clip: 0.15}
	fs.IntVar(&o.steps, "steps", o.steps, "with -loop: optimizer steps of the whole job (a resumed job runs the ones left)")
	fs.IntVar(&o.stopAfter, "stop-after", 0, "with -loop: stop after N steps, saving a checkpoint with -ckpt, as a preemption would (0: run all -steps)")
	fs.Float64Var(&o.lr, "lr", o.lr, "with -loop: AdamW's peak learning rate (2 warmup steps, cosine-decayed to a tenth at -steps)")
	fs.Float64Var(&o.clip, "clip", o.clip, "with -loop: clip the gradients by their global L2 norm at this value (0: no clipping)")
	fs.StringVar(&o.metrics, "metrics", "", "with -loop: write one JSON line per step (docs/metrics.md) to this file, or - for stdout")
	fs.StringVar(&o.ckpt, "ckpt", "", "with -loop: save checkpoints (docs/checkpoints.md) to this directory, every -ckpt-every steps and at the end")
	fs.IntVar(&o.ckptEvery, "ckpt-every", 0, "with -loop and -ckpt: save every N steps (0: only at the end)")
	fs.StringVar(&o.resume, "resume", "", "with -loop: resume from the checkpoint in this directory (any -owners, -tower owner or first alike); -steps is the whole job's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: every option is a flag (-help lists them)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !*loop {
		for _, name := range loopOnly {
			if set[name] {
				return fmt.Errorf("-%s belongs to the runtime/train job: add -loop (the runtime/pipe path runs -iters iterations with its own optimizer, no checkpoints or metrics)", name)
			}
		}
		return run(out, *owners, *towerKind, *iters, *check)
	}
	if set["iters"] {
		return errors.New("-iters counts the runtime/pipe path's iterations; with -loop give -steps")
	}
	o.owners, o.tower, o.check = *owners, *towerKind, *check
	_, err := trainLoop(o, out, logger)
	return err
}

func run(out io.Writer, owners, towerKind string, iters int, check bool) error {
	prog, ok := programs[owners]
	if !ok {
		return fmt.Errorf("-owners %q: want min or full", owners)
	}
	if towerKind != "owner" && towerKind != "first" && towerKind != "frozen" && towerKind != "none" {
		return fmt.Errorf("-tower %q: want owner, first, frozen or none", towerKind)
	}
	if iters < 1 {
		return fmt.Errorf("-iters %d: want at least 1", iters)
	}
	sp := prog.spec
	body := newBody(sp.Stages)
	towers := make([]*affineTower, sp.Ranks)
	srcs := make([]*source, sp.Ranks)
	trs := transport.NewInProc(sp.Ranks, transport.InProcTimeout(20*time.Second))
	xs := make([]*pipe.Exec, sp.Ranks)
	for r := range sp.Ranks {
		towers[r], srcs[r] = newTower(), &source{}
		stages := map[int]pipe.Stage{}
		var mine []*affine
		for s, rr := range sp.RankOf {
			if rr == r {
				stages[s] = body[s]
				mine = append(mine, body[s])
			}
		}
		tw := towers[r]
		cfg := pipe.Config{Rank: r, Spec: sp, Stages: stages, Loss: mse{}, Data: srcs[r], Transport: trs[r],
			OptStep: func() error {
				for _, s := range mine {
					s.step()
				}
				if towerKind == "owner" || towerKind == "first" {
					tw.step()
				}
				return nil
			}}
		switch towerKind {
		case "owner", "first":
			cfg.Tower, cfg.TowerAtFirst = tw, towerKind == "first"
		case "frozen":
			cfg.Data = pipe.WithPreprocess(srcs[r], tw.frozen)
		}
		x, err := pipe.New(cfg)
		if err != nil {
			return err
		}
		defer x.Close()
		xs[r] = x
	}
	defer func() {
		for _, tr := range trs {
			tr.Close()
		}
	}()
	var losses [][]float64
	for it := range iters {
		for _, s := range srcs {
			s.setIter(it)
		}
		if err := pipe.RunAll(xs, prog.ranks); err != nil {
			return fmt.Errorf("iteration %d: %w", it, err)
		}
		ls := xs[sp.RankOf[sp.Stages-1]].Losses()
		losses = append(losses, ls)
		fmt.Fprintf(out, "iteration %d: mean loss %.6f\n", it, mean(ls))
	}
	for r, s := range srcs {
		fmt.Fprintf(out, "rank %d loaded the inputs of micro-batches %v\n", r, s.loadedIn(iters-1))
	}
	if !check {
		return nil
	}
	refBody, refTower := newBody(sp.Stages), newTower()
	want := sequential(refBody, refTower, towerKind, sp.Micro, iters)
	const tol = 1e-12 // the replicas' tower gradients add in another order
	for it := range want {
		for m := range want[it] {
			if d := math.Abs(losses[it][m] - want[it][m]); !(d <= tol) {
				return fmt.Errorf("check: iteration %d micro %d: loss %v, sequential %v", it, m, losses[it][m], want[it][m])
			}
		}
	}
	for s := range body {
		if math.Abs(body[s].a-refBody[s].a) > tol || math.Abs(body[s].b-refBody[s].b) > tol {
			return fmt.Errorf("check: stage %d's parameters differ from the sequential run's", s)
		}
	}
	for r, tw := range towers {
		if math.Abs(tw.a-refTower.a) > tol || math.Abs(tw.b-refTower.b) > tol {
			return fmt.Errorf("check: rank %d's tower (%v, %v), sequential (%v, %v)", r, tw.a, tw.b, refTower.a, refTower.b)
		}
	}
	fmt.Fprintf(out, "check: equal to sequential training within %g (%d iterations, tower %s, %s ownership)\n", tol, iters, towerKind, owners)
	return nil
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// source is one rank's DataSource: deterministic micro-batches of the
// current iteration; it records the inputs it served.
type source struct {
	mu     sync.Mutex
	iter   int
	loaded map[int][]int // iteration -> micro-batches
}

func (s *source) setIter(it int) {
	s.mu.Lock()
	s.iter = it
	s.mu.Unlock()
}

func (s *source) loadedIn(it int) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := slices.Clone(s.loaded[it])
	slices.Sort(l)
	return l
}

func (s *source) Input(m int) (*tensor.Dense, error) {
	s.mu.Lock()
	if s.loaded == nil {
		s.loaded = map[int][]int{}
	}
	s.loaded[s.iter] = append(s.loaded[s.iter], m)
	it := s.iter
	s.mu.Unlock()
	return gen(it, m, 0), nil
}

func (s *source) Target(m int) (*tensor.Dense, error) {
	s.mu.Lock()
	it := s.iter
	s.mu.Unlock()
	return gen(it, m, 1), nil
}

// gen is micro-batch m's input (salt 0) or target (salt 1) at iteration it.
func gen(it, m, salt int) *tensor.Dense {
	v := make([]float64, 6)
	for i := range v {
		v[i] = float64((it*7+m*5+i*3+salt)%9-4) / 4
	}
	return tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(v))
}
