package sim

import (
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// TestEveryKindDrawn: every kind of abi's table is drawn with its own
// letter (abi's, never '?') and a colour class of its own kind of step (never
// catNone), so a kind added to abi that the drawings do not cover fails
// here, not in a user's timeline.
func TestEveryKindDrawn(t *testing.T) {
	for _, k := range abi.Kinds() {
		st := ir.Step{Kind: k, Stage: 1, Micro: 2}
		want := string(rune(k.Code()))
		if k.HasMicro() {
			want += "2"
		}
		if k.IsOverlap() {
			st.Sub = []ir.Step{{Kind: abi.Forward, Stage: 1, Micro: 3}, {Kind: abi.Backward, Stage: 0, Micro: 2}}
			want = "F3B2"
		}
		got := stepLabel(st)
		if strings.Contains(got, "?") || got != want {
			t.Errorf("%s: grid label %q; want %q (abi's letter %q)", k, got, want, k.Code())
		}
		if c := categoryOf(k); c == catNone {
			t.Errorf("%s: no colour class (categoryOf gives %q): add a rule for the kind's class to gen/sim/glyph.go", k, catInfo[c].name)
		}
	}
	if got := glyph(abi.Invalid); got != "?" {
		t.Errorf("glyph(Invalid) = %q; want ?", got)
	}
	// The kinds the compute classes keep apart have colours of their own.
	for _, tc := range []struct {
		k    abi.Kind
		want category
	}{
		{abi.Forward, catF}, {abi.Backward, catB}, {abi.BackwardInput, catI}, {abi.BackwardWeight, catW},
		{abi.Recompute, catRecompute}, {abi.GatherLoss, catComm}, {abi.AllReduce, catComm}, {abi.TieGrad, catComm},
		{abi.SendF, catComm}, {abi.DataLoad, catData}, {abi.MpipeRecv, catData}, {abi.SwapWaitLoad, catSwap},
		{abi.ReduceGrad, catFSDP}, {abi.OptStep, catOpt},
	} {
		if got := categoryOf(tc.k); got != tc.want {
			t.Errorf("categoryOf(%s) = %q; want %q", tc.k, catInfo[got].name, catInfo[tc.want].name)
		}
	}
}

// TestGridAndSVGDrawRecomputeAndGatherLoss: a two-rank program with data
// loads, RECOMPUTE, TIE_GRAD, ALL_REDUCE, REDUCE_GRAD, OPT_STEP and
// GATHER_LOSS, all taking time, is drawn without a '?': each step shows its
// letter, the grid's header names the letters, and the SVG's legend has
// the recompute colour.
func TestGridAndSVGDrawRecomputeAndGatherLoss(t *testing.T) {
	const text = "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0RECOMPUTE0 0B0 0TIE_GRAD 0REDUCE_GRAD ALL_REDUCE OPT_STEP GATHER_LOSS\n" +
		"rank 1: 1RECV_F0 1DATA_LOAD0 1F0 1RECOMPUTE0 1B0 1SEND_B0 1TIE_GRAD 1REDUCE_GRAD ALL_REDUCE OPT_STEP GATHER_LOSS\n"
	p, err := ir.ParseText(text)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ResolvePeers(); err != nil {
		t.Fatal(err)
	}
	c, err := ParseCost("F=1,B=2,comm=1,data=1,reduce=1,opt=1", 0)
	if err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, p, c)
	g := Grid(r, p, 0)
	lines := strings.Split(strings.TrimRight(g, "\n"), "\n")
	if want := "; L DATA_LOAD, G REDUCE_GRAD, O OPT_STEP, E TIE_GRAD, A ALL_REDUCE, C RECOMPUTE, l GATHER_LOSS"; !strings.HasSuffix(lines[1], want) {
		t.Errorf("grid header %q; want it to end in %q\n%s", lines[1], want, g)
	}
	for _, l := range lines[3:] {
		if strings.Contains(l, "?") {
			t.Errorf("grid row draws a '?': %q\n%s", l, g)
		}
		cells := strings.Fields(l[strings.Index(l, "|")+1:])
		for _, cell := range []string{"L0", "C0", "E", "G", "A", "O", "l"} {
			if !slices.Contains(cells, cell) {
				t.Errorf("grid row %q lacks the cell %q\n%s", l, cell, g)
			}
		}
	}
	b := string(SVG(r, p, SVGMeta{Schedule: "every kind"}))
	wellFormed(t, []byte(b))
	for _, s := range []string{">C recompute</text>", ">comm</text>", ">data</text>", ">FSDP</text>", ">optimizer</text>", `fill="` + catInfo[catRecompute].fill + `"`} {
		if !strings.Contains(b, s) {
			t.Errorf("SVG lacks %s", s)
		}
	}
	if strings.Contains(b, ">other</text>") || strings.Contains(b, `fill="`+catInfo[catNone].fill+`"`) {
		t.Error("SVG draws a step in the colour of no kind")
	}
}
