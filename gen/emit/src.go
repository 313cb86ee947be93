package emit

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/ir"
)

// chunk names one (stage, micro) pair.
type chunk struct{ stage, micro int }

// srcSlots returns, for each step of rank r's program, the `src` argument of
// its compute call: for F(s, m) the slot of F(s-1, m) when stage s-1 is on
// rank r, for B or I(s, m) the slot of the B or I of (s+1, m) when stage s+1
// is on rank r, and ir.None otherwise (the input comes from the chunk's own
// slot, and for steps that are not F, B or I). A neighbour stage on rank r
// whose step is missing is an error.
func srcSlots(pl ir.Placement, r int, steps []ir.Step) ([]int, error) {
	fwd := make(map[chunk]int)
	bwd := make(map[chunk]int)
	for _, st := range steps {
		for _, c := range st.Computes() {
			switch {
			case c.Kind == ir.Forward:
				fwd[chunk{c.Stage, c.Micro}] = c.Slot
			case c.Kind.IsBackward():
				bwd[chunk{c.Stage, c.Micro}] = c.Slot
			}
		}
	}
	src := make([]int, len(steps))
	for i, st := range steps {
		src[i] = ir.None
		var (
			from  chunk
			index map[chunk]int
			name  string
		)
		switch {
		case st.Kind == ir.Forward:
			from, index, name = chunk{st.Stage - 1, st.Micro}, fwd, "F"
		case st.Kind.IsBackward():
			from, index, name = chunk{st.Stage + 1, st.Micro}, bwd, "B or I"
		default:
			continue
		}
		if pl.Rank(from.stage) != r {
			continue
		}
		slot, ok := index[from]
		if !ok {
			return nil, fmt.Errorf("emit: rank %d step %d (%s): stage %d is on this rank but the rank has no %s of (stage %d, micro %d) to take the input from", r, i, st, from.stage, name, from.stage, from.micro)
		}
		src[i] = slot
	}
	return src, nil
}
