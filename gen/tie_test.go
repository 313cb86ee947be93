package gen

import (
	"fmt"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// TestTiesEveryFamily: every family that lowers, at P = 2..4, with the
// first stage tied to the last and (with four stages or more) stages 1 and
// 2 tied too, lowers and verifies with -tie, and simulates: the exchange
// completes in sim as in verify, and costs at least nothing (the makespan
// is the untied one's or more, by at most the exchanges' comm).
func TestTiesEveryFamily(t *testing.T) {
	cost := sim.DefaultCost()
	cost.Comm = 0.25
	for _, fam := range schedules.All() {
		if fam.ComputeOnly != "" || fam.Name == "dualpipe" {
			continue // not lowerable, or two model copies (refused with ties)
		}
		for P := 2; P <= 4; P++ {
			cfg := ir.Config{Schedule: fam.Name, Ranks: P, Micro: 2 * P}
			plain, err := Lower(cfg, Options{})
			if err != nil {
				continue // the family does not take this size
			}
			S := plain.Program.Stages()
			ties := []ir.Tie{{A: 0, B: S - 1}}
			if S >= 4 {
				ties = append(ties, ir.Tie{A: 1, B: 2})
			}
			t.Run(fmt.Sprintf("%s/P%d", fam.Name, P), func(t *testing.T) {
				for _, batch := range []bool{false, true} {
					opt := Options{Passes: passes.Options{Ties: ties, Batch: batch}}
					res, err := Lower(cfg, opt)
					if err != nil {
						t.Fatalf("ties %v, batch %v: %v", ties, batch, err)
					}
					tied, err := sim.Run(res.Program, cost)
					if err != nil {
						t.Fatalf("ties %v, batch %v: sim: %v", ties, batch, err)
					}
					opt.Passes.Ties = nil
					base, err := Lower(cfg, opt)
					if err != nil {
						t.Fatal(err)
					}
					untied, err := sim.Run(base.Program, cost)
					if err != nil {
						t.Fatal(err)
					}
					if d := tied.Makespan - untied.Makespan; d < -1e-9 || d > float64(len(ties))*cost.Comm+1e-9 {
						t.Errorf("ties %v, batch %v: makespan %v, untied %v; want up to %v more", ties, batch, tied.Makespan, untied.Makespan, float64(len(ties))*cost.Comm)
					}
				}
			})
		}
	}
}
