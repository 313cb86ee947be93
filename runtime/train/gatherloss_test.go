package train_test

import (
	"math"
	"testing"

	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/train"
)

// gathered is p with a GATHER_LOSS after each rank's program, as
// `ppgen gen -gather-loss` places it.
func gathered(p train.Program) train.Program {
	q := p
	q.Ranks = make([]func(*pipe.Exec) error, len(p.Ranks))
	for r, f := range p.Ranks {
		q.Ranks[r] = func(x *pipe.Exec) error {
			if err := f(x); err != nil {
				return err
			}
			x.GatherLoss()
			return x.Err()
		}
	}
	return q
}

// TestGatheredLoss: after a program's GATHER_LOSS every rank holds every
// loss; the logged loss is the same bits as without it, on one pipeline
// (no reduction then) and over two data-parallel replicas (each
// pipeline's rank 0 adds them), so no loss counts twice.
func TestGatheredLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    train.Program
		dp   int
	}{{"1f1b", onef1b, 1}, {"dp", halfProg, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			want := losses(run(t, config(tc.p, tc.dp, 3)))
			got := losses(run(t, config(gathered(tc.p), tc.dp, 3)))
			if len(got) != len(want) {
				t.Fatalf("%d losses; want %d", len(got), len(want))
			}
			for i := range want {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Errorf("step %d: loss %v with GATHER_LOSS, %v without", i+1, got[i], want[i])
				}
			}
		})
	}
}
