package train_test

import (
	"math"
	"sync"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/world"
)

// towers is a Config.Tower factory that keeps every replica it built, so
// that a test can read their trained parameters.
type towers struct {
	mu   sync.Mutex
	made []nn.Layer
}

func (tw *towers) build() (nn.Layer, error) {
	lin, err := nn.NewLinear(width, width, tensor.Float64, nn.NewRand(77))
	if err != nil {
		return nil, err
	}
	l := nn.NewSequential(lin, nn.Tanh{})
	tw.mu.Lock()
	tw.made = append(tw.made, l)
	tw.mu.Unlock()
	return l, nil
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
// relative, in process, over TCP and with two data-parallel replicas.
func TestTower(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    train.Program
		clip float64
		tcp  bool
		dp   int
	}{
		{"mpipe", mpipe, 0, false, 1}, {"mpipe clipped", mpipe, 0.01, false, 1}, {"clip program", clip, 0.01, false, 1},
		{"mpipe clipped over tcp", mpipe, 0.01, true, 1}, {"mpipe clipped", mpipe, 0.01, false, 2},
	} {
		t.Run(tc.name+" "+describe(tc.p, tc.dp), func(t *testing.T) {
			var run1, ref towers
			c := config(tc.p, tc.dp, 3)
			if tc.clip > 0 {
				c.Clip = tc.clip
			}
			c.Tower = run1.build
			if tc.tcp {
				c.World, c.WorldOptions = "tcp", world.Options{Loopback: true}
			}
			got := run(t, c)
			c.World, c.WorldOptions = "", world.Options{}
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
