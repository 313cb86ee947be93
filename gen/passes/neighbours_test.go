package passes

import (
	"fmt"
	"testing"

	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/ir"
)

// TestNeighbourTable: the table answers every kind, stage (in range or
// not), micro-batch and rank as deps.Across, needsSend and srcStage do,
// with one model copy (from the table) and with two (from deps).
func TestNeighbourTable(t *testing.T) {
	for _, c := range []struct {
		name   string
		place  ir.Placement
		copies int
	}{
		{"loop P=4 V=2", ir.Loop(4, 2), 1},
		{"vshape P=4", ir.VShape(4), 1},
		{"vshape P=4, 2 copies", ir.VShape(4), 2},
		{"zigzag P=2 V=4, 2 copies", ir.Zigzag(2, 4), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := ir.Program{Placement: c.place, Micro: 4, Copies: c.copies}
			nt := newNeighbourTable(&p)
			if (nt.tab != nil) != (c.copies <= 1) {
				t.Fatalf("table built: %v, want %v (copies %d)", nt.tab != nil, c.copies <= 1, c.copies)
			}
			S := p.Stages()
			n := 0
			for _, k := range append(ir.Kinds(), ir.Invalid) {
				for s := -1; s <= S; s++ {
					for m := -1; m <= p.Micro; m++ {
						st := ir.Compute(k, s, m)
						ws, wr, wa, wg, wok := deps.Across(&p, &st)
						gs, gr, ga, gg, gok := nt.across(&st)
						if fmt.Sprint(gs, gr, ga, gg, gok) != fmt.Sprint(ws, wr, wa, wg, wok) {
							t.Errorf("across(%s): %v %v %v %v %v, deps.Across: %v %v %v %v %v", st, gs, gr, ga, gg, gok, ws, wr, wa, wg, wok)
						}
						for r := range p.Placement.NumRanks {
							wk, wok := needsSend(&p, r, &st)
							gk, gok := nt.send(r, &st)
							if gk != wk || gok != wok {
								t.Errorf("send(%d, %s): %s %v, needsSend: %s %v", r, st, gk, gok, wk, wok)
							}
						}
						if c := int(neighbourClass[k]); c != 0 && nt.local != nil && s >= 0 && s < S {
							if got, want := int(nt.local[(c-1)*S+s]), srcStage(&p, p.Placement.RankOf[s], &st); got != want {
								t.Errorf("local(%s): %d, srcStage: %d", st, got, want)
							}
						}
						if gok {
							n++
						}
					}
				}
			}
			if n == 0 {
				t.Fatal("no step has a neighbour: the test checks nothing")
			}
		})
	}
}
