package sim

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// wellFormed fails unless b is well-formed XML.
func wellFormed(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(b)))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
}

func TestSVGGolden(t *testing.T) {
	p := onef1bComm(4, 8)
	c := uniformCost(1, 2, 1, 0.1)
	r := mustRun(t, p, c)
	b := SVG(r, p, SVGMeta{Schedule: "1f1b"})
	wellFormed(t, b)
	golden(t, "1f1b_p4_m8.svg", b)
	if string(SVG(r, p, SVGMeta{Schedule: "1f1b"})) != string(b) {
		t.Error("SVG bytes are not deterministic")
	}
}

func TestSVGCompareGolden(t *testing.T) {
	c := DefaultCost()
	g, o, z := gpipe(4, 6), onef1b(4, 6, false), onef1b(4, 6, true)
	b := SVGCompare(
		SVGPanel{mustRun(t, g, c), g, SVGMeta{Schedule: "gpipe"}},
		SVGPanel{mustRun(t, o, c), o, SVGMeta{Schedule: "1f1b"}},
		SVGPanel{mustRun(t, z, c), z, SVGMeta{Title: "1f1b split <I,W>"}},
	)
	wellFormed(t, b)
	golden(t, "compare.svg", b)
}

func TestSVGReadableAtP8M32(t *testing.T) {
	p := onef1b(8, 32, false)
	r := mustRun(t, p, DefaultCost())
	b := string(SVG(r, p, SVGMeta{Schedule: "1f1b"}))
	wellFormed(t, []byte(b))
	if !strings.HasPrefix(b, `<svg xmlns="http://www.w3.org/2000/svg" width="1200"`) {
		t.Errorf("width is not 1200: %.80s", b)
	}
	// Every backward (2 units ≈ 19 px) carries its micro number; so do the forwards (≈ 9.6 px).
	for _, want := range []string{">31</text>", "P=8 V=1 M=32", "bubble 17.9%", "peak activations 8", "F forward", "B backward"} {
		if !strings.Contains(b, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if n := strings.Count(b, "<text"); n < 2*8*32 {
		t.Errorf("only %d labels for %d compute boxes", n, 2*8*32)
	}
}

func TestSVGEdgeCases(t *testing.T) {
	wellFormed(t, SVG(Result{}, ir.Program{}, SVGMeta{}))
	wellFormed(t, SVGCompare())
	p, _ := ir.ParseText("rank 0: 0F0 0SWAP_LAUNCH_OFFLOAD0 0F1 0SWAP_WAIT_OFFLOAD0 0SWAP_LAUNCH_LOAD0 0B1 0SWAP_WAIT_LOAD0 0B0 0REDUCE_GRAD OPT_STEP\n")
	c, _ := ParseCost("swap=1.5,reduce=1,opt=0.5", 1)
	r := mustRun(t, p, c)
	b := string(SVG(r, p, SVGMeta{Schedule: "swap & fsdp", Width: 600}))
	wellFormed(t, []byte(b))
	for _, want := range []string{"swap &amp; fsdp", ">swap</text>", ">FSDP</text>", ">optimizer</text>", `width="600"`} {
		if !strings.Contains(b, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

// TestSVGShades checks that a rank's later stages are drawn in a lighter
// shade of their kind's colour, with a legend entry, and that a V = 1
// timeline has neither.
func TestSVGShades(t *testing.T) {
	p, err := ir.ParseText("rank 0: 0F0 0F1 3F0 3B0 3F1 3B1 0B0 0B1\nrank 1: 1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1\n")
	if err != nil {
		t.Fatal(err)
	}
	if p.Placement.Name != "v" {
		t.Fatalf("placement %q, want v", p.Placement.Name)
	}
	r := mustRun(t, p, DefaultCost())
	b := SVG(r, p, SVGMeta{Schedule: "v"})
	wellFormed(t, b)
	golden(t, "v_p2_m2.svg", b)
	s := string(b)
	light := shade(catInfo[catF].fill, 1, 2)
	for _, want := range []string{
		`fill="` + light + `" stroke="#ffffff" stroke-width="0.5"><title>rank 0 3F0`,              // stage 3 is rank 0's second stage
		`fill="` + catInfo[catF].fill + `" stroke="#ffffff" stroke-width="0.5"><title>rank 0 0F0`, // stage 0 its first
		"dark: a rank&#39;s first stage", ">time</text>",
	} {
		if !strings.Contains(s, want) && !strings.Contains(s, strings.ReplaceAll(want, "&#39;", "'")) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	one := onef1b(2, 2, false)
	if s := string(SVG(mustRun(t, one, DefaultCost()), one, SVGMeta{})); strings.Contains(s, "first stage") || strings.Contains(s, light) {
		t.Error("a V = 1 timeline has shades or their legend")
	}
}

func TestShadeAndTextColour(t *testing.T) {
	for _, tt := range []struct {
		color     string
		k, levels int
		want      string
	}{
		{"#4e79a7", 0, 2, "#4e79a7"},
		{"#4e79a7", 1, 1, "#4e79a7"},
		{"#000000", 1, 2, "#8c8c8c"}, // 55% white
		{"#000000", 1, 3, "#464646"}, // half of that
		{"#ffffff", 1, 2, "#ffffff"},
		{"bogus", 1, 2, "bogus"},
	} {
		if got := shade(tt.color, tt.k, tt.levels); got != tt.want {
			t.Errorf("shade(%s, %d, %d) = %s, want %s", tt.color, tt.k, tt.levels, got, tt.want)
		}
	}
	for c := category(0); c < numCats; c++ {
		// The text colours of the palette are what textOn picks, so shaded
		// boxes use the same rule as the base ones.
		if got := textOn(catInfo[c].fill); got != catInfo[c].text {
			t.Errorf("textOn(%s) = %s, want %s (%s)", catInfo[c].fill, got, catInfo[c].text, catInfo[c].name)
		}
	}
}
