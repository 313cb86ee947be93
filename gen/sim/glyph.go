package sim

import (
	"strconv"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// How a step is drawn, in the text grid (Grid) and the SVG timelines (SVG,
// SVGCompare). Nothing here names a kind's letter or colour by hand: the
// letter is abi's (Kind.Code, the letter of the kind in generated tables)
// and the colour follows the kind's class in abi's table (IsRebuild, IsComm,
// IsSwap, ...), so a kind added to abi is drawn without a change here, and
// TestEveryKindDrawn fails for one no class covers.

// glyph returns the letter drawings show for a step of kind k: abi's letter
// of the kind ("F", "C" for RECOMPUTE, "l" for GATHER_LOSS), or "?" for
// Invalid and kinds out of range.
func glyph(k ir.Kind) string {
	c := k.Code()
	if c == 0 {
		return "?"
	}
	return string(rune(c))
}

// stepLabel is the short form of a step in a grid cell: its kind's glyph
// followed by its micro-batch when the kind names one ("F3", "C3", "L3");
// an overlap shows both sub-steps ("F7B3").
func stepLabel(st ir.Step) string {
	if st.Kind.IsOverlap() && len(st.Sub) > 0 {
		s := ""
		for _, sub := range st.Sub {
			s += stepLabel(sub)
		}
		return s
	}
	if st.Kind.HasMicro() && st.Micro >= 0 {
		return glyph(st.Kind) + strconv.Itoa(st.Micro)
	}
	return glyph(st.Kind)
}

// category is the colour class of a box.
type category int

const (
	catF category = iota
	catB
	catI
	catW
	catRecompute
	catComm
	catData
	catSwap
	catFSDP
	catOpt
	catNone // a kind no rule below covers (TestEveryKindDrawn rejects it)
	numCats
)

var catInfo = [numCats]struct {
	name, fill, text string
}{
	catF:         {"F forward", "#4e79a7", "#ffffff"},
	catB:         {"B backward", "#59a14f", "#ffffff"},
	catI:         {"I input grad", "#f28e2b", "#000000"},
	catW:         {"W weight grad", "#b07aa1", "#ffffff"},
	catRecompute: {"C recompute", "#ff9da7", "#000000"},
	catComm:      {"comm", "#8c8c8c", "#ffffff"},
	catData:      {"data", "#9c755f", "#ffffff"},
	catSwap:      {"swap", "#76b7b2", "#000000"},
	catFSDP:      {"FSDP", "#edc948", "#000000"},
	catOpt:       {"optimizer", "#e15759", "#ffffff"},
	catNone:      {"other", "#ff00ff", "#ffffff"}, // loud: a rule is missing
}

// categoryOf is the colour class of a step of kind k, read from abi's
// classes: the four compute kinds have a colour each, a rebuild
// (RECOMPUTE) its own; data loads and transfers on the data channel are
// data; other transfers, rendezvous and collectives (TIE_GRAD, ALL_REDUCE,
// GATHER_LOSS) and batch brackets are comm; swaps, FSDP steps and OPT_STEP
// have theirs. An overlap is drawn as its two sub-steps, each in its own
// colour; the overlap kind itself is F's.
func categoryOf(k ir.Kind) category {
	switch {
	case k == abi.Forward || k.IsOverlap():
		return catF
	case k == abi.Backward:
		return catB
	case k == abi.BackwardInput:
		return catI
	case k == abi.BackwardWeight:
		return catW
	case k.IsRebuild():
		return catRecompute
	case k == abi.DataLoad || k.Channel() == abi.DataChannel:
		return catData
	case k.IsComm() || k.IsRendezvous() || k.IsBatch():
		return catComm
	case k.IsSwap():
		return catSwap
	case k.IsFSDP():
		return catFSDP
	case k == abi.OptStep:
		return catOpt
	}
	return catNone
}
