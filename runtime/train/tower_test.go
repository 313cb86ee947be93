package train_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/checkpoint"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/world"
)

// towers is a Config.Tower factory that keeps every replica it built, so
// that a test can read their trained parameters and count their forwards.
type towers struct {
	mu   sync.Mutex
	made []*countedLayer
}

// countedLayer counts its forwards.
type countedLayer struct {
	nn.Layer
	forwards atomic.Int64
}

func (l *countedLayer) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	l.forwards.Add(1)
	return l.Layer.Forward(x)
}

func (tw *towers) build() (nn.Layer, error) {
	lin, err := nn.NewLinear(width, width, tensor.Float64, nn.NewRand(77))
	if err != nil {
		return nil, err
	}
	l := &countedLayer{Layer: nn.NewSequential(lin, nn.Tanh{})}
	tw.mu.Lock()
	tw.made = append(tw.made, l)
	tw.mu.Unlock()
	return l, nil
}

// forwards returns the forwards of each replica that ran some.
func (tw *towers) forwards() []int64 {
	var out []int64
	for _, l := range tw.made {
		if n := l.forwards.Load(); n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func towerValues(l nn.Layer) []float64 {
	var out []float64
	for _, p := range l.Params() {
		out = append(out, p.Value.Float64s()...)
	}
	return out
}

// TestTower trains a trainable tower (Config.Tower) through train.Run and
// with train.Reference, the model without a pipeline whose tower runs
// before stage 0: under mpipe every owner runs the forward of the inputs it
// loads and their backward at OPT_STEP, and the replicas' gradients are
// summed; under a -clip program (the tower on the first stage's rank) the
// norm is reduced after that sum. Losses, gradient norms (the tower's
// gradients counted once, not once per replica: clipped at every step, so
// a norm counted four times would show in every parameter), the stages'
// parameters and every tower replica's equal the reference's within 1e-12
// relative, in process, over TCP and with two data-parallel replicas, with
// owner backward and without it (Config.TowerAtFirst: the tower on the
// first stage's rank only).
func TestTower(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       train.Program
		clip    float64
		tcp     bool
		dp      int
		atFirst bool // Config.TowerAtFirst
	}{
		{"mpipe", mpipe, 0, false, 1, false}, {"mpipe clipped", mpipe, 0.01, false, 1, false}, {"clip program", clip, 0.01, false, 1, false},
		{"mpipe clipped over tcp", mpipe, 0.01, true, 1, false}, {"mpipe clipped", mpipe, 0.01, false, 2, false},
		{"mpipe at first", mpipe, 0, false, 1, true}, {"mpipe at first clipped", mpipe, 0.01, false, 1, true},
		{"mpipe at first clipped over tcp", mpipe, 0.01, true, 2, true},
		{"fsdp clipped", fsdp, 0.01, false, 2, false},
	} {
		t.Run(tc.name+" "+describe(tc.p, tc.dp), func(t *testing.T) {
			var run1, ref towers
			c := config(tc.p, tc.dp, 3)
			if tc.clip > 0 {
				c.Clip = tc.clip
			}
			c.Tower, c.TowerAtFirst = run1.build, tc.atFirst
			c.FSDP = tc.p.Spec.Fingerprint == fsdp.Spec.Fingerprint
			if tc.tcp {
				c.World, c.WorldOptions = "tcp", world.Options{Loopback: true}
			}
			got := run(t, c)
			c.World, c.WorldOptions, c.FSDP = "", world.Options{}, false
			c.Tower = ref.build
			want, err := train.Reference(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(run1.made) != tc.p.Spec.Ranks*tc.dp || len(ref.made) != 1 {
				t.Fatalf("%d tower replicas in Run, %d in Reference; want %d and 1", len(run1.made), len(ref.made), tc.p.Spec.Ranks*tc.dp)
			}
			within := func(what string, a, b []float64) {
				t.Helper()
				if len(a) != len(b) {
					t.Fatalf("%s: %d values against %d", what, len(a), len(b))
				}
				for i := range a {
					if d := math.Abs(a[i]-b[i]) / max(math.Abs(a[i]), math.Abs(b[i]), 1e-30); d > 1e-12 {
						t.Fatalf("%s: value %d is %v, the reference's %v: relative difference %g", what, i, a[i], b[i], d)
					}
				}
			}
			var norms, refNorms []float64
			for i, r := range got.Records {
				norms, refNorms = append(norms, r.GradNorm), append(refNorms, want.Records[i].GradNorm)
				if tc.clip > 0 && r.GradNorm <= tc.clip {
					t.Fatalf("step %d's norm %g does not clip at %g: the test would not see a norm counted per replica", i+1, r.GradNorm, tc.clip)
				}
			}
			within("losses", losses(got), losses(want))
			within("gradient norms", norms, refNorms)
			within("stage parameters", values(got), values(want))
			for r, l := range run1.made {
				within("the tower replica of rank "+string(rune('0'+r)), towerValues(l), towerValues(ref.made[0]))
			}
			if same := towerValues(ref.made[0]); len(same) == 0 {
				t.Fatal("the tower has no parameters")
			}
			// Every micro-batch's forward ran once per step, under
			// TowerAtFirst on the first stage's rank of each replica only,
			// under mpipe without it on its owner: more ranks.
			fw, total := run1.forwards(), int64(0)
			for _, n := range fw {
				total += n
			}
			if want := int64(3 * tc.p.Spec.Micro * tc.dp); total != want {
				t.Fatalf("the replicas ran %d tower forwards (%v), want %d", total, fw, want)
			}
			atFirst := len(fw) == tc.dp && fw[0] == int64(3*tc.p.Spec.Micro)
			if tc.atFirst != atFirst && tc.p.Spec.Owned > 0 {
				t.Fatalf("TowerAtFirst %v: the replicas ran %v tower forwards", tc.atFirst, fw)
			}
		})
	}
}

// TestCountTokens: under mpipe each rank loads only the inputs it owns
// (its data source refuses the others), and Config.CountTokens' counts,
// all-reduced over the world, are each step's tokens: every micro-batch
// loaded once per step, by one rank.
func TestCountTokens(t *testing.T) {
	for _, p := range []train.Program{mpipe, onef1b} {
		var mu sync.Mutex
		loads := 0
		c := config(p, 1, 3)
		c.TokensPerStep = 0
		c.CountTokens = func(x *tensor.Dense) int64 {
			mu.Lock()
			loads++
			mu.Unlock()
			return int64(x.Shape()[0])
		}
		res := run(t, c)
		if want := 3 * p.Spec.Micro; loads != want {
			t.Errorf("%s: %d inputs loaded in 3 steps, want %d", describe(p, 1), loads, want)
		}
		for i, r := range res.Records {
			if want := int64((i + 1) * global * rows); r.Tokens != want {
				t.Errorf("%s: step %d: %d tokens, want %d", describe(p, 1), i+1, r.Tokens, want)
			}
		}
	}
}

// towerJob is a job of p over dp replicas training a tower built by tw,
// stopped after stop steps (0: not) with checkpoints in ckpt, resumed from
// resume.
func towerJob(t *testing.T, p train.Program, dp int, tw *towers, stop int, ckpt, resume string) *train.Result {
	t.Helper()
	c := config(p, dp, 2*half)
	c.Tower = tw.build
	c.StopAfter, c.CheckpointDir, c.Resume = stop, ckpt, resume
	return run(t, c)
}

// TestTowerResume trains a tower under mpipe (owner backward) 2N steps
// uninterrupted, and N steps, a save and N more resumed from it, in
// process and over TCP, and beside FSDP-sharded stages over two replicas
// (the tower replicated): the losses of the last N steps, every layer's and
// the tower's parameters and AdamW state in the final checkpoints (the
// tower saved once, by world rank 0: checkpoint.TowerLayer) and every
// tower replica at the end are equal bit for bit.
func TestTowerResume(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     train.Program
		dp    int
		world string
		opts  world.Options
	}{
		{"inproc", mpipe, 1, "inproc", world.Options{}}, {"tcp", mpipe, 1, "tcp", world.Options{Loopback: true}},
		{"fsdp", fsdp, 2, "inproc", world.Options{}},
	} {
		t.Run(tc.name+" "+describe(tc.p, tc.dp), func(t *testing.T) {
			dir := t.TempDir()
			job := func(tw *towers, stop int, ckpt, resume string) *train.Result {
				c := config(tc.p, tc.dp, 2*half)
				c.FSDP = tc.p.Spec.Fingerprint == fsdp.Spec.Fingerprint
				c.Tower, c.World, c.WorldOptions = tw.build, tc.world, tc.opts
				c.StopAfter, c.CheckpointDir, c.Resume = stop, ckpt, resume
				return run(t, c)
			}
			full, first, second := filepath.Join(dir, "full"), filepath.Join(dir, "first"), filepath.Join(dir, "second")
			var wholeTowers, firstTowers, resumedTowers towers
			whole := job(&wholeTowers, 0, full, "")
			job(&firstTowers, half, first, "")
			resumed := job(&resumedTowers, 0, second, first)
			if resumed.Start != half || len(resumed.Records) != half {
				t.Fatalf("resumed job started at %d with %d records, want %d and %d", resumed.Start, len(resumed.Records), half, half)
			}
			m, err := checkpoint.ReadManifest(first)
			if err != nil {
				t.Fatal(err)
			}
			for r, s := range m.Shards {
				if holds := slices.Contains(s.Layers, checkpoint.TowerLayer); holds != (r == 0) || !m.Layout.Tower {
					t.Fatalf("layout %v: shard %d holds layers %v; want the tower in shard 0 only", m.Layout, r, s.Layers)
				}
			}
			same(t, "losses of the resumed steps", losses(resumed), losses(whole)[half:])
			same(t, "parameters and optimizer state at the end", params(t, second), params(t, full))
			for r, l := range resumedTowers.made {
				same(t, fmt.Sprintf("the tower replica of rank %d", r), towerValues(l), towerValues(wholeTowers.made[0]))
			}
			if a, b := towerValues(firstTowers.made[0]), towerValues(wholeTowers.made[0]); slices.Equal(a, b) {
				t.Fatal("the tower after N steps equals the tower after 2N: the test would not see a tower left unrestored")
			}
		})
	}
}

// TestTowerResumeOtherLayout saves a job training a tower under mpipe at
// P=4 after N steps and resumes it under mpipe without owner backward
// (TowerAtFirst), a -clip 1f1b program at P=4, zbv at P=2, two replicas of
// half the micro-batches, one rank and FSDP over two replicas: the tower's state does not depend
// on the layout (every replica is the same), so each reads it from world
// rank 0's shard. The losses, the checkpoints' parameters and optimizer
// state (the tower's included) and every tower replica equal the
// uninterrupted mpipe job's within crossTol.
func TestTowerResumeOtherLayout(t *testing.T) {
	dir := t.TempDir()
	full, saved := filepath.Join(dir, "full"), filepath.Join(dir, "saved")
	var wholeTowers towers
	whole := towerJob(t, mpipe, 1, &wholeTowers, 0, full, "")
	towerJob(t, mpipe, 1, &towers{}, half, saved, "")
	want := towerValues(wholeTowers.made[0])
	for _, tc := range []struct {
		p       train.Program
		dp      int
		atFirst bool
	}{{mpipe, 1, true}, {clip, 1, false}, {zbv2, 1, false}, {halfProg, 2, false}, {single, 1, false}, {fsdp, 2, false}} {
		t.Run(fmt.Sprintf("%s TowerAtFirst=%v", describe(tc.p, tc.dp), tc.atFirst), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			var tw towers
			c := config(tc.p, tc.dp, 2*half)
			c.Tower, c.TowerAtFirst = tw.build, tc.atFirst
			c.FSDP = tc.p.Spec.Fingerprint == fsdp.Spec.Fingerprint
			c.CheckpointDir, c.Resume = out, saved
			resumed := run(t, c)
			if d := maxDiff(t, "losses", losses(resumed), losses(whole)[half:]); d > crossTol {
				t.Fatalf("losses differ from the uninterrupted job's by %g, over %g", d, crossTol)
			}
			if d := maxDiff(t, "parameters", params(t, out), params(t, full)); d > crossTol {
				t.Fatalf("parameters differ from the uninterrupted job's by %g, over %g", d, crossTol)
			}
			for r, l := range tw.made {
				if d := maxDiff(t, "the tower", towerValues(l), want); d > crossTol {
					t.Fatalf("the tower replica of rank %d differs from the uninterrupted job's by %g", r, d)
				}
			}
		})
	}
}

// TestTowerRefused: what the loop does not do with a tower is refused
// with an error naming why and the fix: a checkpoint holding a tower
// resumed without one and the reverse, or by another tower,
// TowerAtFirst without a tower, and a tower whose parameters share a name (a
// checkpoint names them) when checkpointing.
func TestTowerRefused(t *testing.T) {
	dir := t.TempDir()
	withTower, without := filepath.Join(dir, "tower"), filepath.Join(dir, "none")
	towerJob(t, mpipe, 1, &towers{}, 1, withTower, "")
	c := config(mpipe, 1, 2*half)
	c.StopAfter, c.CheckpointDir = 1, without
	run(t, c)
	twoLinears := func() (a, b nn.Layer, err error) {
		if a, err = nn.NewLinear(width, width, tensor.Float64, nn.NewRand(77)); err != nil {
			return nil, nil, err
		}
		b, err = nn.NewLinear(width, width, tensor.Float64, nn.NewRand(78))
		return a, b, err
	}
	dup := func() (nn.Layer, error) { // weight, bias, weight, bias
		a, b, err := twoLinears()
		return dupNames{Layer: a, other: b}, err
	}
	deeper := func() (nn.Layer, error) { // 4 parameters, the saved tower's 2
		a, b, err := twoLinears()
		return nn.NewSequential(a, b), err
	}
	for _, tc := range []struct {
		name string
		edit func(*train.Config)
		want string
	}{
		{"resumed without a tower", func(c *train.Config) { c.Resume = withTower }, "set Config.Tower to the same tower"},
		{"a tower resumed from none", func(c *train.Config) { c.Tower, c.Resume = (&towers{}).build, without }, "the checkpoint holds no tower"},
		{"TowerAtFirst alone", func(c *train.Config) { c.TowerAtFirst = true }, "TowerAtFirst without Config.Tower"},
		{"names", func(c *train.Config) { c.Tower, c.CheckpointDir = dup, t.TempDir() }, "give them distinct names"},
		{"another tower", func(c *train.Config) { c.Tower, c.Resume = deeper, withTower }, "the tower: the checkpoint holds 2 parameters, the model 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config(mpipe, 1, 2*half)
			tc.edit(&c)
			_, err := train.Run(context.Background(), c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// dupNames is a tower whose parameters share names: its Layer's, then
// other's (both Linears: weight, bias, weight, bias).
type dupNames struct {
	nn.Layer
	other nn.Layer
}

func (d dupNames) Params() []*nn.Param { return append(d.Layer.Params(), d.other.Params()...) }
