package pipe_test

import (
	"errors"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// releasing is a stage whose Forward returns a context of its own per call
// and records the contexts Release is given.
type releasing struct {
	noop
	made, released []*int
	fail           bool
}

func (r *releasing) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	c := new(int)
	r.made = append(r.made, c)
	return x, c, nil
}

func (r *releasing) Release(saved any) error {
	if r.fail {
		return errors.New("no such context")
	}
	r.released = append(r.released, saved.(*int))
	return nil
}

// TestForwardOnlyReleases: a forward-only program calls Release on every
// context its stage's Forward returns, under a Timeline's wrapper too, and
// reports a Release error as the step's; a training program never does.
func TestForwardOnlyReleases(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fwdOnly  bool
		timeline bool
		fail     bool
	}{{"forward-only", true, false, false}, {"forward-only with timeline", true, true, false}, {"training", false, false, false}, {"release fails", true, false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			st := &releasing{fail: tc.fail}
			sp := pipe.Spec{Schedule: "x", Ranks: 1, Stages: 1, Micro: 2, Slots: []int{2}, RankOf: []int{0}, Fingerprint: "test:release", ForwardOnly: tc.fwdOnly}
			cfg := pipe.Config{Rank: 0, Spec: sp, Stages: map[int]pipe.Stage{0: st}, Loss: noop{}, Data: noop{}}
			if tc.timeline {
				cfg.Timeline = &pipe.Timeline{}
			}
			x, err := pipe.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			for m := range 2 {
				run(x, load(0, m, m))
				run(x, fwd(0, m, m, -1))
			}
			err = x.Err()
			switch {
			case tc.fail:
				if err == nil || !strings.Contains(err.Error(), "releasing a forward-only context: no such context") {
					t.Errorf("Err = %v; want the Release error", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			want := 0
			if tc.fwdOnly {
				want = 2
			}
			if len(st.made) != 2 || len(st.released) != want {
				t.Fatalf("%d forwards, %d contexts released; want 2 and %d", len(st.made), len(st.released), want)
			}
			for i, c := range st.released {
				if c != st.made[i] {
					t.Errorf("release %d got another context than forward %d returned", i, i)
				}
			}
		})
	}
}
