package schedules

import (
	"fmt"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
)

func init() {
	Register(Family{
		Name:           "v-half",
		Summary:        "V-Half (controllable memory): V placement, I/W split; half of 1F1B's activation memory and about half its bubble",
		Constraints:    "virtual = 2 on the v placement; any ranks ≥ 1 and micro ≥ 1",
		DefaultVirtual: 2,
		Build:          func(cfg ir.Config) (ir.Program, error) { return buildVShape("v-half", cfg) },
	})
	Register(Family{
		Name:           "v-min",
		Summary:        "V-Min (controllable memory): V placement, I/W split; a third of 1F1B's activation memory, about two thirds of its bubble",
		Constraints:    "virtual = 2 on the v placement; any ranks ≥ 1 and micro ≥ 1",
		DefaultVirtual: 2,
		Build:          func(cfg ir.Config) (ir.Program, error) { return buildVShape("v-min", cfg) },
	})
}

// buildVShape returns V-Half or V-Min of Qi et al., "Pipeline Parallelism
// with Controllable Memory" (arXiv 2405.15362). Rank r holds the down stage
// d = r and the up stage u = 2P-1-r (v placement).
//
// Building block. The four passes of one micro-batch that carry the
// dependency chain run on rank r at these units (F = I = W = 1):
//
//	          F(d)   F(u)      I(u)          I(d)
//	v-half    2r     3P-2-r    3P-1+c+2r     6P-2+c-r     c = 3 for even P, else 0
//	v-min     r      2P-1-r    2P+c+r        4P-1+c-r     c = 2 when 3 divides P, else 0
//
// Each pass comes after the ones it depends on (the forward walks down the
// ranks and back up, the input gradient the other way), and micro-batch k's
// block is micro-batch 0's shifted by 6k units. The four offsets are
// distinct modulo 6 for every P, so the repeated blocks never collide and
// leave two free units in every six for the two W's. Sorting each rank's
// passes by unit gives its F/I order (the paper's repeat-and-squeeze).
//
// W placement. Instead of the paper's fixed W slots and reordering, zbFill
// runs that order in unit time and places each W where the rank would
// otherwise wait, or before a forward that would exceed the family's memory
// bound in live chunks (F run, W not yet; a chunk is half a stage):
//
//	v-half   2·⌊(P+2)/2⌋ chunks = ⌊(P+2)/2⌋ stages' worth, about half of 1F1B's P
//	v-min    2·⌊(P+4)/3⌋ chunks = ⌊(P+4)/3⌋ stages' worth, about a third of 1F1B's P
//
// The blocks' own order never holds more than that, so the bound is the
// building block's peak. At F = I = W = 1 with no comm cost and M ≥ 2P, each
// rank's idle time is at most 3(P-1) units for v-half (1F1B, whose stage is
// two chunks here, idles 6(P-1)) and about two thirds of 1F1B's for v-min
// (0.61..0.75 of it for P = 2..16).
func buildVShape(name string, cfg ir.Config) (ir.Program, error) {
	p, err := zbVProgram(name, cfg)
	if err != nil {
		return ir.Program{}, err
	}
	ranks, m := cfg.Ranks, cfg.Micro
	var limit int
	var block func(r int) [4]int
	if name == "v-half" {
		c := 0
		if ranks%2 == 0 {
			c = 3
		}
		limit = 2 * ((ranks + 2) / 2)
		block = func(r int) [4]int {
			return [4]int{2 * r, 3*ranks - 2 - r, 3*ranks - 1 + c + 2*r, 6*ranks - 2 + c - r}
		}
	} else {
		c := 0
		if ranks%3 == 0 {
			c = 2
		}
		limit = 2 * ((ranks + 4) / 3)
		block = func(r int) [4]int {
			return [4]int{r, 2*ranks - 1 - r, 2*ranks + c + r, 4*ranks - 1 + c - r}
		}
	}
	type timed struct {
		unit int
		step ir.Step
	}
	skel := make([][]ir.Step, ranks)
	for r := range skel {
		down, up := r, 2*ranks-1-r
		kinds := [4]ir.Kind{ir.Forward, ir.Forward, ir.BackwardInput, ir.BackwardInput}
		stages := [4]int{down, up, up, down}
		off := block(r)
		ev := make([]timed, 0, 4*m)
		for k := 0; k < m; k++ {
			for j := range off {
				ev = append(ev, timed{off[j] + 6*k, ir.Compute(kinds[j], stages[j], k)})
			}
		}
		slices.SortFunc(ev, func(a, b timed) int { return a.unit - b.unit })
		skel[r] = make([]ir.Step, len(ev))
		for i, e := range ev {
			if i > 0 && ev[i-1].unit == e.unit {
				return ir.Program{}, fmt.Errorf("%s: building block collides at unit %d on rank %d; this is a bug in the family", name, e.unit, r)
			}
			skel[r][i] = e.step
		}
	}
	p.Ranks, err = zbFill(p.Placement, m, skel, limit)
	if err != nil {
		return ir.Program{}, err
	}
	return p, nil
}
