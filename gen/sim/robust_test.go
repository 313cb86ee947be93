package sim

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestMutationsNeverPanic runs random mutations of valid programs (swap two
// steps, drop, duplicate or move a step, change a micro or stage) through Run
// and the renderers: each must return (an error or a result), never panic or hang.
func TestMutationsNeverPanic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bases := []ir.Program{onef1bComm(3, 4), naiveComm(gpipe(3, 3)), onef1b(4, 4, true)}
	ok, stuck, other := 0, 0, 0
	for iter := 0; iter < 3000; iter++ {
		p := bases[iter%len(bases)].Clone()
		for n := 1 + rng.IntN(3); n > 0; n-- {
			r := rng.IntN(len(p.Ranks))
			steps := p.Ranks[r]
			if len(steps) == 0 {
				continue
			}
			i, j := rng.IntN(len(steps)), rng.IntN(len(steps))
			switch rng.IntN(6) {
			case 0:
				steps[i], steps[j] = steps[j], steps[i]
			case 1:
				p.Ranks[r] = append(steps[:i:i], steps[i+1:]...)
			case 2:
				p.Ranks[r] = append(steps[:i+1:i+1], steps[i:]...)
			case 3:
				q := rng.IntN(len(p.Ranks))
				p.Ranks[q] = append(p.Ranks[q], steps[i])
			case 4:
				steps[i].Micro = rng.IntN(6) - 1
			case 5:
				steps[i].Stage = rng.IntN(6) - 1
			}
		}
		res, err := Run(p, uniformCost(1, 2, 1, 0.5))
		switch {
		case err == nil:
			ok++
			if len(res.Events) != p.NumSteps() {
				t.Fatalf("%d events for %d steps", len(res.Events), p.NumSteps())
			}
			_ = Grid(res, p, 60)
			if _, err := Trace(res, p, TraceMeta{}); err != nil {
				t.Fatal(err)
			}
			_ = SVG(res, p, SVGMeta{})
		case errors.Is(err, ErrStuck):
			stuck++
		default:
			other++
		}
	}
	t.Logf("%d completed, %d stuck, %d rejected", ok, stuck, other)
	if ok == 0 || stuck == 0 {
		t.Errorf("mutations should both complete and get stuck sometimes: %d ok, %d stuck", ok, stuck)
	}
}
