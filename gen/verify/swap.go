package verify

import (
	"github.com/ppgen/ppgen/gen/ir"
)

// The swap states of a chunk (docs/design.md §3): its saved activations stay
// resident until SWAP_LAUNCH_OFFLOAD, are out from SWAP_WAIT_OFFLOAD to
// SWAP_LAUNCH_LOAD, and back after SWAP_WAIT_LOAD, which must come before
// its backward.
const (
	swapNone uint8 = iota
	swapOffloading
	swapOut
	swapLoading
	swapBack
)

// swapNext is the state each swap step moves a chunk from and to.
var swapNext = map[ir.Kind][2]uint8{
	ir.SwapLaunchOffload: {swapNone, swapOffloading},
	ir.SwapWaitOffload:   {swapOffloading, swapOut},
	ir.SwapLaunchLoad:    {swapOut, swapLoading},
	ir.SwapWaitLoad:      {swapLoading, swapBack},
}

// swapStep checks swap step st (index i of rank r) against its chunk's state
// and moves it on; it returns the change of the rank's resident chunks.
func (c *checker) swapStep(r, i int, st *ir.Step) (int, error) {
	ch := st.Stage*c.M + st.Micro
	mv := swapNext[st.Kind]
	state := c.swapState[ch]
	switch {
	case st.Kind == ir.SwapLaunchOffload && c.at[aF][ch] < 0:
		return 0, c.fail(r, i, *st, Order, "%s offloads the activations of (stage %d, micro %d) before its forward ran", st, st.Stage, st.Micro)
	case state == mv[0]:
	case state > mv[0]:
		return 0, c.fail(r, i, *st, Duplicate, "%s runs twice for this chunk, or after a later swap step of it: a chunk is swapped out and back at most once", st)
	default:
		return 0, c.fail(r, i, *st, Order, "%s comes before %s of the same chunk", st, ir.Compute(swapKindBefore(st.Kind), st.Stage, st.Micro))
	}
	c.swapState[ch] = mv[1]
	switch st.Kind {
	case ir.SwapWaitOffload:
		return -1, nil
	case ir.SwapLaunchLoad:
		return +1, nil
	}
	return 0, nil
}

// swapKindBefore is the swap step that must precede one of kind k.
func swapKindBefore(k ir.Kind) ir.Kind {
	switch k {
	case ir.SwapWaitOffload:
		return ir.SwapLaunchOffload
	case ir.SwapLaunchLoad:
		return ir.SwapWaitOffload
	default:
		return ir.SwapLaunchLoad
	}
}

// swapUse checks that a backward step (B, I or W) of chunk (stage, micro)
// finds its activations resident.
func (c *checker) swapUse(r, i int, top, st *ir.Step) error {
	ch := st.Stage*c.M + st.Micro
	if s := c.swapState[ch]; s != swapNone && s != swapBack {
		return c.fail(r, i, *top, Order, "%s needs the activations of its chunk, which are swapped out: SWAP_WAIT_LOAD of (stage %d, micro %d) must come first", st, st.Stage, st.Micro)
	}
	return nil
}

// swapEnd checks that every chunk of rank r that started swapping came back.
func (c *checker) swapEnd(r int) error {
	for ch, s := range c.swapState {
		stage, micro := ch/c.M, ch%c.M
		if s != swapNone && s != swapBack && c.rankOf[stage] == r {
			return c.fail(r, -1, ir.Compute(ir.SwapWaitLoad, stage, micro), Missing, "the activations of (stage %d, micro %d) are swapped out and never loaded back", stage, micro)
		}
	}
	return nil
}
