package gen

import (
	"fmt"
	"strings"
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

// TestLowerProgramTies: -tie with a program read with -in: a compute order
// (TIE_GRADs in it or not) gets its exchanges from the tie pass; a lowered
// file without them gets them at the end of its ranks; one that places them
// keeps them, and verify checks where (here: too early, a deadlock).
func TestLowerProgramTies(t *testing.T) {
	ties := []ir.Tie{{A: 0, B: 1}}
	opt := Options{Passes: passes.Options{Ties: ties}}
	count := func(p ir.Program) int {
		n := 0
		for _, steps := range p.Ranks {
			for _, st := range steps {
				if st.Kind == ir.TieGrad {
					n++
				}
			}
		}
		return n
	}
	for _, text := range []string{
		"rank 0: 0F0 0B0 0TIE_GRAD\nrank 1: 1F0 1B0 1TIE_GRAD\n",
		"rank 0: 0F0 0B0\nrank 1: 1F0 1B0\n",
		"rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0\n",
	} {
		p, err := ir.ParseText(text)
		if err != nil {
			t.Fatal(err)
		}
		res, err := LowerProgram(p, opt)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if count(res.Program) != 2 || len(res.Program.Ties) != 1 {
			t.Errorf("%q: %d TIE_GRADs, ties %v; want 2 and %v", text, count(res.Program), res.Program.Ties, ties)
		}
	}
	early, err := ir.ParseText("rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 0TIE_GRAD OPT_STEP\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1TIE_GRAD 1SEND_B0 OPT_STEP\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LowerProgram(early, opt); err == nil || !strings.Contains(err.Error(), "deadlock") {
		t.Errorf("a file exchanging before its last send: %v; want a deadlock", err)
	}
}
