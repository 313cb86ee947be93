package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"

	"github.com/ppgen/ppgen/runtime/metrics"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/world"
)

// run trains the model of o with runtime/train: this process's ranks of
// o.transport's world (every rank in-process, one over TCP). World rank 0
// prints the losses; with -check every rank compares the layers it holds
// with sequential training.
func run(o options, out io.Writer, logger *slog.Logger) error {
	sc, err := lookup(o.schedule)
	if err != nil {
		return err
	}
	sp := sc.train.Spec
	dt, err := o.dt()
	if err != nil {
		return err
	}
	sh, err := openShards(o, dt)
	if err != nil {
		return err
	}
	defer sh.close()
	cfg, err := jobConfig(o, sc, sh, out, logger)
	if err != nil {
		return err
	}
	if o.trace != "" {
		cfg.Timeline = &pipe.Timeline{}
	}
	if o.metrics != "" {
		f := os.Stdout
		if o.metrics != "-" {
			if f, err = os.Create(o.metrics); err != nil {
				return fmt.Errorf("-metrics: %w", err)
			}
			defer f.Close()
		}
		cfg.Metrics = f
	}
	where := "in-process"
	if o.transport == "tcp" {
		where = "TCP, one process per rank"
	}
	if o.transport == "inproc" || os.Getenv("RANK") == "0" {
		if err := header(out, o, sc, where); err != nil {
			return err
		}
	}
	res, err := train.Run(context.Background(), cfg)
	if err != nil {
		return err
	}
	if o.svg != "" && len(res.Records) > 0 && (o.transport == "inproc" || os.Getenv("RANK") == "0") {
		if err := writeFile(o.svg, func(f io.Writer) error { return writeSVG(f, res.Records) }); err != nil {
			return fmt.Errorf("-svg: %w", err)
		}
		fmt.Fprintf(out, "wrote %s: the loss curve\n", o.svg)
	}
	if o.trace != "" {
		if err := writeFile(o.trace, func(f io.Writer) error { return cfg.Timeline.WriteTrace(f, sp.Schedule, sc.train.Program) }); err != nil {
			return fmt.Errorf("-trace: %w", err)
		}
		fmt.Fprintf(out, "wrote %s: the last training step's measured timeline\n", o.trace)
	}
	if !o.check {
		return nil
	}
	return check(o, out, sh, sp.Micro, res)
}

// jobConfig is the runtime/train job of o: sc's programs, the model's
// layers, the shards' data, AdamW, the cosine schedule, clipping,
// checkpoints; world rank 0 prints the losses to out.
func jobConfig(o options, sc schedule, shs *shards, out io.Writer, logger *slog.Logger) (train.Config, error) {
	sp := sc.train.Spec
	dt, _ := o.dt()
	sh, err := shs.sample(sp.Micro, o.dp)
	if err != nil {
		return train.Config{}, err
	}
	print := func(rank int, format string, args ...any) {
		if rank == 0 {
			fmt.Fprintf(out, format, args...)
		}
	}
	return train.Config{
		Train: train.Program{Spec: sp, Ranks: sc.train.Ranks}, Eval: &train.Program{Spec: sc.eval.Spec, Ranks: sc.eval.Ranks},
		World: o.transport, WorldOptions: world.Options{Timeout: o.timeout, Logger: logger, Config: o.config}, DP: o.dp,
		Layers: split(o.sh.Blocks, sp.Stages),
		Layer:  (&layers{sh: o.sh, dt: dt, seed: o.seed, tie: o.tie}).layer,
		Loss:   func(scale float64) pipe.Loss { return nn.SoftmaxCrossEntropy{Scale: scale} },
		Data:   sh.trainStep, EvalData: sh.evalRun, EvalRuns: evalRuns, EvalEvery: o.evalEvery,
		Steps: o.steps, StopAfter: o.stopAfter, Optimizer: o.optimizer, LR: o.lrSchedule(), Clip: o.clip,
		TokensPerStep: int64(o.dp * sp.Micro * o.sh.Batch * o.sh.SeqLen),
		CheckpointDir: o.ckpt, CheckpointEvery: o.ckptEvery, Resume: o.resume,
		Hooks: train.Hooks{
			AfterStep: func(rank int, r metrics.Record) error {
				if r.Step%int64(o.logEvery) == 0 || r.Step == int64(o.steps) {
					print(rank, "step %d loss %.4f\n", r.Step, r.Loss)
				}
				if !math.IsNaN(r.EvalLoss) {
					print(rank, "validation loss %.4f\n", r.EvalLoss)
				}
				return nil
			},
			AfterEval: func(rank, step int, loss float64) error {
				if step == 0 { // the initial model's; the others print after their step
					print(rank, "validation loss %.4f\n", loss)
				}
				return nil
			},
		},
	}, nil
}
