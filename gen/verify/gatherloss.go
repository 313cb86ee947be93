package verify

import (
	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// GATHER_LOSS (-gather-loss) is a collective (collective.go): every rank
// posts the same number, the n-th of each meeting the n-th of every other
// once its transfers before it are done. Where it falls against OPT_STEP
// does not matter; what does is that a rank's last one comes after every
// forward of a last stage on that rank (lossesBefore), so the losses it
// hands the others are all there.
func init() {
	declareCollective(abi.GatherLoss, collective{
		hint:  "a GATHER_LOSS passes only when every rank is at its own with every transfer before it done: put it at the end of every rank's program, as -gather-loss does",
		check: (*checker).lossesBefore,
	})
}

// lossesBefore checks that each rank's last GATHER_LOSS follows every F
// of the rank that computes a loss (of a stage that ends its model copy's
// route), alone or in an overlap.
func (c *checker) lossesBefore(steps [][]int) error {
	per := c.S / max(c.p.Copies, 1)
	if per < 1 {
		return nil
	}
	for r, idx := range steps {
		if len(idx) == 0 {
			continue
		}
		last := idx[len(idx)-1]
		for i := len(c.p.Ranks[r]) - 1; i > last; i-- {
			st := &c.p.Ranks[r][i]
			for _, f := range append([]ir.Step{*st}, st.Sub...) {
				if f.Kind == ir.Forward && (f.Stage+1)%per == 0 {
					return c.fail(r, last, c.p.Ranks[r][last], Order, "comes before %s (step %d), which computes a loss: the losses this rank gathers would lack it; put GATHER_LOSS after the rank's last forward of a last stage, at its end as -gather-loss does", f, i)
				}
			}
		}
	}
	return nil
}
