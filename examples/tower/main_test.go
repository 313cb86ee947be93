package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/examples/internal/compare"
)

// TestTowerTrainsAsSequential: every ownership mode and tower kind trains
// to the sequential run's losses and parameters (run's -check), and the
// flags' bad values are refused.
func TestTowerTrainsAsSequential(t *testing.T) {
	for _, owners := range []string{"min", "full"} {
		for _, tower := range []string{"owner", "first", "frozen", "none"} {
			var out strings.Builder
			if err := run(&out, owners, tower, 3, true); err != nil {
				t.Errorf("-owners %s -tower %s: %v", owners, tower, err)
				continue
			}
			if !strings.Contains(out.String(), "check: equal to sequential training") {
				t.Errorf("-owners %s -tower %s: no check line in\n%s", owners, tower, out.String())
			}
		}
	}
	for _, tc := range []struct {
		owners, tower string
		iters         int
		want          string
	}{
		{"all", "owner", 1, "-owners"}, {"min", "vision", 1, "-tower"}, {"min", "owner", 0, "-iters"},
	} {
		if err := run(io.Discard, tc.owners, tc.tower, tc.iters, false); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%s, %s, %d) = %v, want an error naming %s", tc.owners, tc.tower, tc.iters, err, tc.want)
		}
	}
}

// loopOpts is -loop's defaults (cli's) with the given ownership, tower
// and steps.
func loopOpts(owners, tower string, steps int) loopOptions {
	return loopOptions{owners: owners, tower: tower, steps: steps, lr: 0.01, clip: 0.15}
}

func trainQuiet(t *testing.T, o loopOptions) *loopResult {
	t.Helper()
	r, err := trainLoop(o, io.Discard, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("-owners %s -tower %s: %v", o.owners, o.tower, err)
	}
	return r
}

// TestLoopMatchesReference: -loop trains every ownership mode and tower
// kind through train.Run to train.Reference's losses, body layers and
// tower (every replica) within checkTol, with the gradients clipped at
// every step (so a tower norm counted once per replica would show), and
// the same comparison against a reference of another learning rate fails.
func TestLoopMatchesReference(t *testing.T) {
	for _, owners := range []string{"min", "full"} {
		for _, tower := range []string{"owner", "first", "frozen", "none"} {
			o := loopOpts(owners, tower, 3)
			o.check = true
			var out strings.Builder
			got, err := trainLoop(o, &out, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("-owners %s -tower %s: %v\n%s", owners, tower, err, out.String())
			}
			if !strings.Contains(out.String(), "check: max relative difference vs sequential training") {
				t.Fatalf("-owners %s -tower %s: no check line in\n%s", owners, tower, out.String())
			}
			for _, r := range got.res.Records {
				if !(r.GradNorm > o.clip) {
					t.Fatalf("-tower %s: step %d's norm %g does not clip at %g", tower, r.Step, r.GradNorm, o.clip)
				}
			}
			if trained := tower == "owner" || tower == "first"; trained != (len(got.towers) == programs[owners].spec.Ranks) {
				t.Fatalf("-tower %s: %d tower replicas", tower, len(got.towers))
			}
			// Every micro-batch's tower forward ran once per step: under
			// -tower first on one replica, under owner on every owner.
			if len(got.forwards) > 0 {
				total, ran := int64(0), 0
				for _, n := range got.forwards {
					total += n
					ran += min(int(n), 1)
				}
				if want := int64(3 * programs[owners].spec.Micro); total != want || (tower == "first") != (ran == 1) {
					t.Fatalf("-owners %s -tower %s: tower forwards per replica %v, want %d in all, on one replica only under first", owners, tower, got.forwards, want)
				}
			}
			other := o
			other.lr *= 2
			if err := other.checkLoop(io.Discard, got); err == nil {
				t.Fatalf("-owners %s -tower %s: the check passed against a reference at another learning rate", owners, tower)
			}
		}
	}
}

// TestLoopResume: 2N steps of -loop equal N steps, a checkpoint and N
// more resumed from it, bit for bit (the resumed steps' losses, every body
// layer, every tower replica), with the tower trained, frozen and on the
// first stage's rank; and a checkpoint of -owners min -tower owner
// resumed under -owners full -tower first equals the uninterrupted job
// within checkTol.
func TestLoopResume(t *testing.T) {
	const n = 3
	for _, tower := range []string{"owner", "first", "frozen"} {
		dir := t.TempDir()
		o := loopOpts("min", tower, 2*n)
		o.ckpt = filepath.Join(dir, "whole")
		whole := trainQuiet(t, o)
		o.ckpt, o.stopAfter = filepath.Join(dir, "first"), n
		first := trainQuiet(t, o)
		o.ckpt, o.stopAfter, o.resume = filepath.Join(dir, "second"), 0, filepath.Join(dir, "first")
		resumed := trainQuiet(t, o)
		if resumed.res.Start != n || len(resumed.res.Records) != n {
			t.Fatalf("-tower %s: resumed at %d with %d records, want %d and %d", tower, resumed.res.Start, len(resumed.res.Records), n, n)
		}
		for i, r := range resumed.res.Records {
			if w := whole.res.Records[n+i]; r.Loss != w.Loss || r.GradNorm != w.GradNorm {
				t.Fatalf("-tower %s: step %d: loss %v norm %v resumed, %v %v uninterrupted", tower, r.Step, r.Loss, r.GradNorm, w.Loss, w.GradNorm)
			}
		}
		if d, err := compare.Layers(resumed.res.Layers, whole.res.Layers); err != nil || d != 0 {
			t.Fatalf("-tower %s: the body's layers differ from the uninterrupted job's by %g (%v)", tower, d, err)
		}
		for r, l := range resumed.towers {
			if d, err := compare.Params(l.Params(), whole.towers[0].Params()); err != nil || d != 0 {
				t.Fatalf("-tower %s: tower replica %d differs from the uninterrupted job's by %g (%v)", tower, r, d, err)
			}
		}
		if d, _ := compare.Layers(first.res.Layers, whole.res.Layers); d == 0 {
			t.Fatalf("-tower %s: the body after %d steps equals the body after %d: the test would not see a job that did not resume", tower, n, 2*n)
		}
		if tower == "owner" {
			other := loopOpts("full", "first", 2*n)
			other.resume = filepath.Join(dir, "first")
			moved := trainQuiet(t, other)
			lossDiff := 0.0
			for i, r := range moved.res.Records {
				lossDiff = max(lossDiff, compare.RelDiff(r.Loss, whole.res.Records[n+i].Loss))
			}
			d, err := compare.Layers(moved.res.Layers, whole.res.Layers)
			if err != nil || d > checkTol || lossDiff > checkTol {
				t.Fatalf("resumed under -owners full -tower first: losses %g, parameters %g (%v) from the uninterrupted job's", lossDiff, d, err)
			}
			for r, l := range moved.towers {
				if d, err := compare.Params(l.Params(), whole.towers[0].Params()); err != nil || d > checkTol {
					t.Fatalf("resumed under -owners full -tower first: tower replica %d differs by %g (%v)", r, d, err)
				}
			}
		}
	}
}

// TestLoopRefused: the combinations runtime/train or its reference do not
// support are refused with an error naming them and what to use, and so
// are the runtime/pipe path's and -loop's flags used in the other mode.
func TestLoopRefused(t *testing.T) {
	dir := t.TempDir()
	trained, frozen := filepath.Join(dir, "trained"), filepath.Join(dir, "frozen")
	o := loopOpts("min", "owner", 2)
	o.ckpt = trained
	trainQuiet(t, o)
	o.tower, o.ckpt = "frozen", frozen
	trainQuiet(t, o)
	quiet := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-loop", "-tower", "frozen", "-resume", trained}, "resume with -tower owner or -tower first"},
		{[]string{"-loop", "-tower", "none", "-resume", trained}, "does not drop it or freeze it"},
		{[]string{"-loop", "-tower", "first", "-resume", frozen}, "resume with the -tower of the job that saved it"},
		{[]string{"-loop", "-check", "-resume", trained}, "does not resume"},
		{[]string{"-loop", "-resume", filepath.Join(dir, "absent")}, "-resume"},
		{[]string{"-loop", "-iters", "2"}, "with -loop give -steps"},
		{[]string{"-ckpt", dir}, "-ckpt belongs to the runtime/train job: add -loop"},
		{[]string{"-steps", "2"}, "-steps belongs to the runtime/train job"},
		{[]string{"-loop", "-tower", "vision"}, "-tower \"vision\""},
		{[]string{"-loop", "-owners", "all"}, "-owners \"all\""},
		{[]string{"-loop", "-steps", "0"}, "-steps 0"},
		{[]string{"-loop", "-ckpt-every", "2"}, "with -ckpt"},
		{[]string{"-loop", "-clip", "-1"}, "-clip -1"},
		{[]string{"-loop", "extra"}, "unexpected argument"},
	} {
		if err := cli(tc.args, io.Discard, quiet); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tower %s: %v; want an error saying %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
