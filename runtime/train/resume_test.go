package train_test

import (
	"path/filepath"
	"testing"

	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/train/internal/testprog"
	"github.com/ppgen/ppgen/runtime/world"
)

// crossTol bounds the difference of losses and parameters between a job
// and the same job resumed under another schedule, P or DP, or run under
// another layout: the gradients are the same sums in another order (the
// micro-batches' losses, the replicas' all-reduce, the norm's shares), a
// few ulps of float64 per step, carried by AdamW's division into the
// weights over the steps.
const crossTol = 1e-9

const half = 3 // steps before the save; the jobs run 2·half

// TestResumeBitIdentical trains 2N steps uninterrupted, and N steps, a
// save, and N more resumed from it, in-process and over TCP (loopback):
// the losses of the last N steps and every parameter and optimizer
// tensor at the end are equal bit for bit.
func TestResumeBitIdentical(t *testing.T) {
	for _, tc := range []struct {
		name  string
		world string
		opts  world.Options
	}{
		{"inproc", "inproc", world.Options{}},
		{"tcp", "tcp", world.Options{Loopback: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			job := func(steps int, ckpt, resume string) *train.Result {
				c := config(onef1b, 1, steps)
				c.World, c.WorldOptions = tc.world, tc.opts
				c.CheckpointDir, c.Resume = ckpt, resume
				if steps < 2*half {
					c.StopAfter = steps // preempted, the job's schedule unchanged
				}
				return run(t, c)
			}
			full := filepath.Join(dir, "full")
			whole := job(2*half, full, "")
			first := filepath.Join(dir, "first")
			job(half, first, "")
			second := filepath.Join(dir, "second")
			resumed := job(2*half, second, first)
			if resumed.Start != half || len(resumed.Records) != half {
				t.Fatalf("resumed job started at %d with %d records, want %d and %d", resumed.Start, len(resumed.Records), half, half)
			}
			same(t, "losses of the resumed steps", losses(resumed), losses(whole)[half:])
			for i, r := range resumed.Records {
				w := whole.Records[half+i]
				if r.Step != w.Step || r.Tokens != w.Tokens || r.LR != w.LR || r.GradNorm != w.GradNorm {
					t.Fatalf("resumed record %+v, uninterrupted %+v", r, w)
				}
			}
			same(t, "parameters and optimizer state at the end", params(t, second), params(t, full))
		})
	}
}

// TestResumeOtherLayout saves a job of 1f1b at P=4 after N steps and
// resumes it under zbv at P=2, under 1f1b at P=4 with two data-parallel
// replicas of half the micro-batches each, on one rank (every layer in
// one stage, at other positions), under dualpipe (two model copies, both
// restored from one layer), auto's uneven split, mpipe and FSDP over two
// replicas (the shards and their optimizer state cut from the layers): the losses and the final
// parameters equal the uninterrupted P=4 job's within crossTol.
func TestResumeOtherLayout(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	c := config(onef1b, 1, 2*half)
	c.CheckpointDir = full
	whole := run(t, c)
	saved := filepath.Join(dir, "saved")
	c = config(onef1b, 1, 2*half)
	c.CheckpointDir, c.StopAfter = saved, half
	run(t, c)
	for _, tc := range []struct {
		p  train.Program
		dp int
	}{{zbv2, 1}, {halfProg, 2}, {single, 1}, {dual, 1}, {auto, 1}, {mpipe, 1}, {fsdp, 2}} {
		t.Run(describe(tc.p, tc.dp), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			c := config(tc.p, tc.dp, 2*half)
			c.FSDP = tc.p.Spec.Fingerprint == fsdp.Spec.Fingerprint
			c.CheckpointDir, c.Resume = out, saved
			resumed := run(t, c)
			if d := maxDiff(t, "losses", losses(resumed), losses(whole)[half:]); d > crossTol {
				t.Fatalf("losses differ from the uninterrupted job's by %g, over %g", d, crossTol)
			}
			if d := maxDiff(t, "parameters", params(t, out), params(t, full)); d > crossTol {
				t.Fatalf("parameters differ from the uninterrupted job's by %g, over %g", d, crossTol)
			}
			t.Logf("resumed from 1f1b P=4: losses %v", losses(resumed))
		})
	}
}

// TestLayouts trains the same job under every layout the loop builds — one
// rank, 1f1b at P=4, zbv at P=2 (two stages per rank), two replicas (in
// process and over TCP),
// dualpipe's two model copies, a -clip program (its ALL_REDUCE reduces the
// norm), mpipe's owned loading, shipped labels, and the program `-schedule
// auto -model uneven.json -partition auto` chose (dualpipe, layers split
// 3, 3, 1, 1: Spec.Layers) — and requires the losses of the one-rank job within crossTol.
func TestLayouts(t *testing.T) {
	ref := losses(run(t, config(single, 1, 2*half)))
	for _, tc := range []struct {
		name string
		p    train.Program
		dp   int
		tcp  bool
	}{
		{"1f1b", onef1b, 1, false}, {"zbv", zbv2, 1, false}, {"dp", halfProg, 2, false}, {"dp over TCP", halfProg, 2, true},
		{"dualpipe", dual, 1, false}, {"clip", clip, 1, false}, {"mpipe", mpipe, 1, false}, {"ship-labels", ship, 1, false}, {"auto", auto, 1, false},
		{"fsdp", fsdp, 2, false},
	} {
		t.Run(tc.name+" "+describe(tc.p, tc.dp), func(t *testing.T) {
			c := config(tc.p, tc.dp, 2*half)
			c.FSDP = tc.p.Spec.Fingerprint == fsdp.Spec.Fingerprint
			if tc.tcp {
				c.World, c.WorldOptions = "tcp", world.Options{Loopback: true}
			}
			got := losses(run(t, c))
			if d := maxDiff(t, "losses", got, ref); d > crossTol {
				t.Fatalf("losses %v differ from the one-rank job's %v by %g", got, ref, d)
			}
		})
	}
}

var (
	single = train.Program{Spec: testprog.SingleSpec, Ranks: testprog.SingleRanks[:]}
	mpipe  = train.Program{Spec: testprog.MpipeSpec, Ranks: testprog.MpipeRanks[:]}
	ship   = train.Program{Spec: testprog.ShipSpec, Ranks: testprog.ShipRanks[:]}
	auto   = train.Program{Spec: testprog.AutoSpec, Ranks: testprog.AutoRanks[:]}
	fsdp   = train.Program{Spec: testprog.FSDPSpec, Ranks: testprog.FSDPRanks[:]}
)

// TestFSDPResume: a job of FSDP over two replicas resumed by the same
// layout equals the uninterrupted one bit for bit; its checkpoint (FSDP
// chunks) resumed by 1f1b at P=4 without FSDP (the chunks gathered into
// layers) within crossTol.
func TestFSDPResume(t *testing.T) {
	dir := t.TempDir()
	job := func(p train.Program, dp int, fsdpOn bool, stop int, ckpt, resume string) *train.Result {
		c := config(p, dp, 2*half)
		c.FSDP, c.StopAfter, c.CheckpointDir, c.Resume = fsdpOn, stop, ckpt, resume
		return run(t, c)
	}
	full, first, second, other := filepath.Join(dir, "full"), filepath.Join(dir, "first"), filepath.Join(dir, "second"), filepath.Join(dir, "other")
	whole := job(fsdp, 2, true, 0, full, "")
	job(fsdp, 2, true, half, first, "")
	resumed := job(fsdp, 2, true, 0, second, first)
	same(t, "losses of the resumed steps", losses(resumed), losses(whole)[half:])
	same(t, "parameters and optimizer state at the end", params(t, second), params(t, full))
	m, err := checkpoint.ReadManifest(first)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Layout.FSDP || len(m.Shards[0].Flats) == 0 {
		t.Fatalf("the FSDP job's checkpoint: layout %v, shard 0 holds flats %v", m.Layout, m.Shards[0].Flats)
	}
	plain := job(onef1b, 1, false, 0, other, first)
	if d := maxDiff(t, "losses", losses(plain), losses(whole)[half:]); d > crossTol {
		t.Fatalf("resumed without FSDP, the losses differ by %g", d)
	}
	if d := maxDiff(t, "parameters", params(t, other), params(t, full)); d > crossTol {
		t.Fatalf("resumed without FSDP, the parameters differ by %g", d)
	}
}
