package sim

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
)

// SVGMeta labels an SVG timeline.
type SVGMeta struct {
	Schedule string // schedule name for the title, e.g. "zbv"
	Title    string // replaces Schedule in the title when set
	Width    int    // total width in pixels; 0 means 1200
}

// SVGPanel is one timeline of SVGCompare.
type SVGPanel struct {
	Result  Result
	Program ir.Program
	Meta    SVGMeta
}

// SVG layout constants, in pixels.
const (
	svgDefaultWidth = 1200
	svgLeft         = 64 // rank labels
	svgRight        = 16
	svgTitleH       = 30
	svgComputeH     = 20
	svgStripH       = 6 // comm, swap and FSDP strips under a rank's compute row
	svgLaneGap      = 5
	svgAxisH        = 22
	svgPanelGap     = 18
	svgLegendH      = 28
)

// SVG renders the result as an SVG timeline: one lane per rank with its
// compute row (F, B, I, W, data loads, RESHARD, REDUCE_GRAD and host steps;
// an overlap is drawn as two half-height boxes) and, when they take time,
// thin strips for its transfers, swaps and FSDP all-gathers (UNSHARD, on its
// own stream), in that order; boxes are coloured by kind, a rank's later
// stages (the second arm of a V, the later chunks of a loop) in lighter
// shades of the same colour, and carry their micro-batch number when it
// fits; idle time shows as the grey lane background. The title gives the
// schedule, P, V, M, the bubble and the peak activations; a time axis and a
// legend of the kinds (and shades) present follow. Boxes
// are scaled so the whole iteration spans meta.Width (default 1200) pixels;
// every box has a tooltip with its step and times. Deterministic bytes.
func SVG(r Result, p ir.Program, meta SVGMeta) []byte {
	return SVGCompare(SVGPanel{Result: r, Program: p, Meta: meta})
}

// SVGCompare stacks several timelines in one SVG on a shared time scale (the
// longest makespan spans the width), so schedules can be compared by eye.
// The width is that of the first panel's meta (default 1200).
func SVGCompare(panels ...SVGPanel) []byte {
	width := svgDefaultWidth
	if len(panels) > 0 && panels[0].Meta.Width > 0 {
		width = max(panels[0].Meta.Width, svgLeft+svgRight+100)
	}
	plotW := float64(width - svgLeft - svgRight)
	span := 0.0
	for _, pn := range panels {
		span = max(span, pn.Result.Makespan)
	}
	if span <= 0 {
		span = 1
	}
	scale := plotW / span

	var body bytes.Buffer
	used := [numCats]bool{}
	shaded := false // some box is drawn in a lighter shade (a rank's later stage)
	y := 0.0
	for i, pn := range panels {
		if i > 0 {
			y += svgPanelGap
		}
		y = svgPanel(&body, pn, y, width, scale, &used, &shaded)
	}
	// Legend.
	y += 8
	x := float64(svgLeft)
	fmt.Fprintf(&body, "<g class=\"legend\" font-size=\"11\">\n")
	fmt.Fprintf(&body, "<rect x=\"%s\" y=\"%s\" width=\"12\" height=\"12\" fill=\"#eeeeee\" stroke=\"#bbbbbb\"/><text x=\"%s\" y=\"%s\">idle</text>\n",
		px(x), px(y), px(x+16), px(y+10))
	x += 56
	for c := category(0); c < numCats; c++ {
		if !used[c] {
			continue
		}
		fmt.Fprintf(&body, "<rect x=\"%s\" y=\"%s\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%s\" y=\"%s\">%s</text>\n",
			px(x), px(y), catInfo[c].fill, px(x+16), px(y+10), catInfo[c].name)
		x += 24 + 6.5*float64(len(catInfo[c].name))
	}
	if shaded {
		// One F box in each shade: the shade says which of the rank's stages a box is.
		x += 8
		for k := 0; k < 2; k++ {
			fmt.Fprintf(&body, "<rect x=\"%s\" y=\"%s\" width=\"12\" height=\"12\" fill=\"%s\"/>", px(x+float64(12*k)), px(y), shade(catInfo[catF].fill, k, 2))
		}
		fmt.Fprintf(&body, "<text x=\"%s\" y=\"%s\">dark: a rank's first stage, light: its later stages</text>\n", px(x+28), px(y+10))
	}
	body.WriteString("</g>\n")
	height := int(math.Ceil(y + svgLegendH - 8))

	var out bytes.Buffer
	fmt.Fprintf(&out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
		width, height, width, height)
	fmt.Fprintf(&out, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", width, height)
	out.Write(body.Bytes())
	out.WriteString("</svg>\n")
	return out.Bytes()
}

// svgPanel draws one timeline from y downwards and returns the y below it.
func svgPanel(b *bytes.Buffer, pn SVGPanel, y float64, width int, scale float64, used *[numCats]bool, shaded *bool) float64 {
	r, p := pn.Result, pn.Program
	P := len(r.Offsets)
	// local[s] is the index of stage s among its rank's stages (0 for the
	// first); levels the most stages a rank holds. Boxes of later stages are
	// drawn lighter, so the two chunks of a V or a loop can be told apart.
	local := make(map[int]int)
	levels := 1
	for rank := 0; rank < P; rank++ {
		sts := p.Placement.StagesOf(rank)
		for i, st := range sts {
			local[st] = i
		}
		levels = max(levels, len(sts))
	}
	shadeOf := func(st ir.Step) int {
		if st.Stage < 0 || levels < 2 {
			return 0
		}
		if k := local[st.Stage]; k > 0 {
			*shaded = true
			return k
		}
		return 0
	}
	hasComm, hasSwap, hasFSDP := false, false, false
	for _, ev := range r.Events {
		if ev.End > ev.Start {
			hasComm = hasComm || ev.Lane == LaneComm
			hasSwap = hasSwap || ev.Lane == LaneSwap
			hasFSDP = hasFSDP || ev.Lane == LaneFSDP
		}
	}
	laneH := float64(svgComputeH)
	for _, has := range []bool{hasComm, hasSwap, hasFSDP} {
		if has {
			laneH += svgStripH + 1
		}
	}

	// Title.
	name := pn.Meta.Title
	if name == "" {
		name = pn.Meta.Schedule
	}
	if name == "" {
		name = "schedule"
	}
	v := "?"
	if vv := p.Placement.Virtual(); vv > 0 {
		v = strconv.Itoa(vv)
	}
	fmt.Fprintf(b, "<g class=\"panel\">\n<text x=\"%d\" y=\"%s\" font-size=\"15\" font-weight=\"bold\">%s</text>", svgLeft, px(y+20), html.EscapeString(name))
	fmt.Fprintf(b, "<text x=\"%d\" y=\"%s\" font-size=\"12\" text-anchor=\"end\" fill=\"#333333\">P=%d V=%s M=%d · makespan %s · bubble %.1f%% (stage span %.1f%%) · peak activations %d</text>\n",
		width-svgRight, px(y+20), P, v, p.Micro, formatNum(round9(r.Makespan)), 100*r.Bubble, 100*r.BubbleSpan, r.Peak())
	y += svgTitleH
	top := y

	// Lanes.
	laneY := func(rank int) float64 { return top + float64(rank)*(laneH+svgLaneGap) }
	for rank := 0; rank < P; rank++ {
		ly := laneY(rank)
		fmt.Fprintf(b, "<text x=\"%d\" y=\"%s\" font-size=\"11\" text-anchor=\"end\">rank %d</text>", svgLeft-6, px(ly+14), rank)
		fmt.Fprintf(b, "<rect x=\"%d\" y=\"%s\" width=\"%s\" height=\"%d\" fill=\"#eeeeee\"/>\n", svgLeft, px(ly), px(r.Makespan*scale), svgComputeH)
	}
	bottom := laneY(P) - svgLaneGap

	// Time axis: grid lines and labels every nice step of about 80 px.
	tick := nice125(80 / scale)
	for t := 0.0; t <= r.Makespan+1e-9; t += tick {
		x := float64(svgLeft) + t*scale
		fmt.Fprintf(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#d0d0d0\" stroke-width=\"0.5\"/>", px(x), px(top), px(x), px(bottom+3))
		fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\" font-size=\"10\" text-anchor=\"middle\" fill=\"#555555\">%s</text>\n", px(x), px(bottom+14), formatNum(round9(t)))
	}
	fmt.Fprintf(b, "<text x=\"%d\" y=\"%s\" font-size=\"10\" text-anchor=\"end\" fill=\"#555555\">time</text>\n", svgLeft-6, px(bottom+14))

	// Boxes.
	for _, ev := range r.Events {
		if ev.End <= ev.Start || ev.Rank < 0 || ev.Rank >= P {
			continue
		}
		x := float64(svgLeft) + ev.Start*scale
		w := (ev.End - ev.Start) * scale
		ly := laneY(ev.Rank)
		tip := fmt.Sprintf("rank %d %s [%s, %s]", ev.Rank, ev.Step, formatNum(round9(ev.Start)), formatNum(round9(ev.End)))
		switch ev.Lane {
		case LaneComm:
			used[categoryOf(ev.Step.Kind)] = true
			svgBox(b, x, ly+svgComputeH+1, w, svgStripH, categoryOf(ev.Step.Kind), 0, 1, "", tip)
		case LaneSwap:
			used[catSwap] = true
			sy := ly + svgComputeH + 1
			if hasComm {
				sy += svgStripH + 1
			}
			svgBox(b, x, sy, w, svgStripH, catSwap, 0, 1, "", tip)
		case LaneFSDP:
			used[catFSDP] = true
			sy := ly + svgComputeH + 1
			if hasComm {
				sy += svgStripH + 1
			}
			if hasSwap {
				sy += svgStripH + 1
			}
			svgBox(b, x, sy, w, svgStripH, catFSDP, 0, 1, "", tip)
		default:
			if ev.Step.Kind.IsOverlap() && len(ev.Step.Sub) == 2 {
				h := float64(svgComputeH) / 2
				for j, sub := range ev.Step.Sub {
					c := categoryOf(sub.Kind)
					used[c] = true
					svgBox(b, x, ly+float64(j)*h, w, h, c, shadeOf(sub), levels, microText(sub), tip)
				}
				continue
			}
			c := categoryOf(ev.Step.Kind)
			used[c] = true
			svgBox(b, x, ly, w, svgComputeH, c, shadeOf(ev.Step), levels, microText(ev.Step), tip)
		}
	}
	b.WriteString("</g>\n")
	return bottom + svgAxisH
}

func microText(st ir.Step) string {
	if st.Micro < 0 {
		return ""
	}
	return strconv.Itoa(st.Micro)
}

// svgBox draws one box with an optional centred label (when it fits) and a
// tooltip, in shade k of levels of its category's colour (0: the colour).
func svgBox(b *bytes.Buffer, x, y, w, h float64, c category, k, levels int, label, tip string) {
	stroke := ""
	if w >= 3 {
		stroke = " stroke=\"#ffffff\" stroke-width=\"0.5\""
	}
	fill, text := catInfo[c].fill, catInfo[c].text
	if k > 0 {
		fill = shade(fill, k, levels)
		text = textOn(fill)
	}
	fmt.Fprintf(b, "<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\" fill=\"%s\"%s><title>%s</title></rect>",
		px(x), px(y), px(max(w, 0.5)), px(h), fill, stroke, html.EscapeString(tip))
	if label != "" {
		size := min(11, h-4, (w-1)/(0.6*float64(len(label))))
		if size >= 5 {
			fmt.Fprintf(b, "<text x=\"%s\" y=\"%s\" font-size=\"%s\" text-anchor=\"middle\" fill=\"%s\" pointer-events=\"none\">%s</text>",
				px(x+w/2), px(y+h/2+size*0.36), px(size), text, label)
		}
	}
	b.WriteByte('\n')
}

// shade mixes the colour "#rrggbb" with white: shade 0 is the colour,
// shade levels-1 is 55% white, the others in between.
func shade(color string, k, levels int) string {
	if k <= 0 || levels < 2 {
		return color
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(color, "#"), 16, 32)
	if err != nil {
		return color
	}
	f := 0.55 * float64(k) / float64(levels-1)
	mix := func(c uint64) uint64 { return uint64(math.Round(float64(c) + (255-float64(c))*f)) }
	r, g, bl := mix(v>>16&0xff), mix(v>>8&0xff), mix(v&0xff)
	return fmt.Sprintf("#%02x%02x%02x", r, g, bl)
}

// textOn picks black or white text for legibility on the fill colour
// "#rrggbb": black when its relative luminance (WCAG, linear light) is above
// 1/3, the rule that also gives the palette's own text colours.
func textOn(fill string) string {
	v, err := strconv.ParseUint(strings.TrimPrefix(fill, "#"), 16, 32)
	if err != nil {
		return "#000000"
	}
	lin := func(c uint64) float64 {
		x := float64(c) / 255
		if x <= 0.04045 {
			return x / 12.92
		}
		return math.Pow((x+0.055)/1.055, 2.4)
	}
	lum := 0.2126*lin(v>>16&0xff) + 0.7152*lin(v>>8&0xff) + 0.0722*lin(v&0xff)
	if lum > 1.0/3 {
		return "#000000"
	}
	return "#ffffff"
}

// nice125 returns the smallest of 1, 2, 5 times a power of ten that is ≥ v.
func nice125(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v*(1-1e-12) {
			return m * e
		}
	}
	return 10 * e
}

// px formats a coordinate with at most two decimals.
func px(v float64) string {
	s := strconv.FormatFloat(math.Round(v*100)/100, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		s = "0"
	}
	return s
}
