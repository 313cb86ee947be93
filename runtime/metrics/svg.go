package metrics

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// SVGOptions labels a loss curve.
type SVGOptions struct {
	// Title is the SVG's <title>. Default "loss curve".
	Title string
	// YLabel labels the loss axis. Default "loss".
	YLabel string
}

// WriteSVG draws the loss curve of recs: the training loss of every record
// that has one (a line) and the validation losses (a line with a dot at
// each evaluation) against the number of updates before the loss was
// taken — a step's training loss (its batch, before its update) at
// Step-1, a validation loss after k steps at k — with labelled axes,
// ticks and a legend. It is plain SVG 1.1. Records need not be sorted; the
// curves follow their order. It refuses records with no finite loss.
func WriteSVG(w io.Writer, recs []Record, o SVGOptions) error {
	const (
		width, height          = 720, 420
		left, right, top, down = 70, 20, 30, 60 // margins
	)
	if o.Title == "" {
		o.Title = "loss curve"
	}
	if o.YLabel == "" {
		o.YLabel = "loss"
	}
	type point struct{ x, loss float64 }
	var train, valid []point
	for _, r := range recs {
		if finite(r.Loss) && r.Step > 0 {
			train = append(train, point{float64(r.Step - 1), r.Loss})
		}
		if finite(r.EvalLoss) {
			valid = append(valid, point{float64(r.Step), r.EvalLoss})
		}
	}
	if len(train) == 0 && len(valid) == 0 {
		return errors.New("metrics: WriteSVG: no finite losses to draw")
	}
	pw, ph := float64(width-left-right), float64(height-top-down)
	steps := 1
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range train {
		steps = max(steps, int(p.x)+1)
		lo, hi = math.Min(lo, p.loss), math.Max(hi, p.loss)
	}
	for _, p := range valid {
		steps = max(steps, int(p.x))
		lo, hi = math.Min(lo, p.loss), math.Max(hi, p.loss)
	}
	lo, hi = math.Floor(lo*2)/2, math.Ceil(hi*2)/2 // to halves
	if hi <= lo {
		hi = lo + 0.5
	}
	x := func(step float64) float64 { return float64(left) + pw*step/float64(steps) }
	y := func(loss float64) float64 { return float64(top) + ph*(hi-loss)/(hi-lo) }
	lossTick := 0.5
	for (hi-lo)/lossTick > 20 {
		lossTick *= 10
	}

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<title>%s</title>`+"\n", escape(o.Title))
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	// Axes and their ticks.
	fmt.Fprintf(b, `<g stroke="black" fill="none"><path d="M%d %d V%d H%d"/></g>`+"\n", left, top, height-down, width-right)
	fmt.Fprintf(b, `<g stroke="#ddd">`)
	for _, t := range ticks(lo, hi, lossTick) {
		fmt.Fprintf(b, `<path d="M%d %.1f H%d"/>`, left, y(t), width-right)
	}
	fmt.Fprintln(b, `</g>`)
	fmt.Fprintf(b, `<g text-anchor="end">`)
	for _, t := range ticks(lo, hi, lossTick) {
		fmt.Fprintf(b, `<text x="%d" y="%.1f">%.1f</text>`, left-6, y(t)+4, t)
	}
	fmt.Fprintln(b, `</g>`)
	fmt.Fprintf(b, `<g text-anchor="middle">`)
	for _, t := range ticks(0, float64(steps), stepTick(steps)) {
		fmt.Fprintf(b, `<text x="%.1f" y="%d">%d</text>`, x(t), height-down+18, int(t))
	}
	fmt.Fprintln(b, `</g>`)
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">training step</text>`+"\n", float64(left)+pw/2, height-down+40)
	fmt.Fprintf(b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", float64(top)+ph/2, escape(o.YLabel))
	var tr, va []string
	for _, p := range train {
		tr = append(tr, fmt.Sprintf("%.1f,%.1f", x(p.x), y(p.loss)))
	}
	for _, p := range valid {
		va = append(va, fmt.Sprintf("%.1f,%.1f", x(p.x), y(p.loss)))
	}
	if len(tr) > 0 {
		fmt.Fprintf(b, `<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="%s"/>`+"\n", strings.Join(tr, " "))
	}
	if len(va) > 0 {
		fmt.Fprintf(b, `<polyline fill="none" stroke="#d62728" stroke-width="2" points="%s"/>`+"\n", strings.Join(va, " "))
		fmt.Fprintf(b, `<g fill="#d62728">`)
		for _, p := range valid {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3"/>`, x(p.x), y(p.loss))
		}
		fmt.Fprintln(b, `</g>`)
	}
	// Legend.
	lx := width - right - 170
	fmt.Fprintf(b, `<g><path d="M%d %d h24" stroke="#1f77b4" stroke-width="1.5"/><text x="%d" y="%d">training loss</text>`, lx, top+10, lx+30, top+14)
	fmt.Fprintf(b, `<path d="M%d %d h24" stroke="#d62728" stroke-width="2"/><circle cx="%d" cy="%d" r="3" fill="#d62728"/><text x="%d" y="%d">validation loss</text></g>`+"\n", lx, top+28, lx+12, top+28, lx+30, top+32)
	fmt.Fprintln(b, `</svg>`)
	return b.Flush()
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// ticks returns the multiples of step in [lo, hi].
func ticks(lo, hi, step float64) []float64 {
	var out []float64
	for t := math.Ceil(lo/step) * step; t <= hi+1e-9 && len(out) < 100; t += step {
		out = append(out, t)
	}
	return out
}

// stepTick is a round tick spacing giving at most ~10 ticks over steps.
func stepTick(steps int) float64 {
	for _, s := range []int{1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 100000} {
		if steps/s <= 10 {
			return float64(s)
		}
	}
	return float64(steps)
}
