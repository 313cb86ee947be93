package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// Grid draws the compute lane of every rank as a text grid for terminals:
// one row per rank, one column per time unit. The unit is the smallest
// compute cost in the result; when the grid would be wider than width
// characters (width > 0) the unit grows to the next "nice" value (1, 1.5, 2,
// 2.5, 3, 4, 5, 6 or 8 times a power of ten) that fits. A cell shows the step that occupies
// most of its time span where it starts: its kind's letter (abi's, see
// glyph) and its micro-batch when the kind names one ("F3", "B3", "I3",
// "W3", "C3" for RECOMPUTE, "L3" for DATA_LOAD; an overlap shows both
// sub-steps, "F7B3"); dashes where it continues, and '.' when the rank is
// idle. The header names every letter shown other than F, B, I and W.
// Transfers, swaps and FSDP all-gathers (UNSHARD, on its own stream) are not
// drawn; a compute step waiting for its stage's all-gather shows as idle
// time. A header gives the time scale with a ruler.
func Grid(r Result, p ir.Program, width int) string {
	P := len(r.Offsets)
	type box struct {
		start, end float64
		label      string
		kind       ir.Kind
	}
	rows := make([][]box, P)
	unit := math.Inf(1)
	labelW := 1
	for _, ev := range r.Events {
		if ev.Lane != LaneCompute || ev.End <= ev.Start || ev.Rank < 0 || ev.Rank >= P {
			continue
		}
		l := stepLabel(ev.Step)
		rows[ev.Rank] = append(rows[ev.Rank], box{ev.Start, ev.End, l, ev.Step.Kind})
		labelW = max(labelW, len(l))
		if ev.Step.Kind.IsCompute() {
			unit = min(unit, ev.End-ev.Start)
		}
	}
	if math.IsInf(unit, 1) {
		unit = math.Inf(1)
		for _, row := range rows {
			for _, b := range row {
				unit = min(unit, b.end-b.start)
			}
		}
		if math.IsInf(unit, 1) {
			unit = 1
		}
	}
	cw := labelW + 1
	prefixW := len("rank " + strconv.Itoa(max(P-1, 0)))
	prefix := func(s string) string { return s + strings.Repeat(" ", prefixW-len(s)) + " |" }
	cols := int(math.Ceil(r.Makespan/unit - 1e-9))
	if width > 0 {
		avail := max((width-prefixW-2)/cw, 1)
		if cols > avail {
			unit = niceAtLeast(r.Makespan / float64(avail))
			cols = int(math.Ceil(r.Makespan/unit - 1e-9))
		}
	}
	cols = max(cols, 0)

	var g strings.Builder // the rows
	shown := make(map[ir.Kind]bool)
	for rank, row := range rows {
		g.WriteString(prefix("rank " + strconv.Itoa(rank)))
		bi, prev := 0, -1
		for c := 0; c < cols; c++ {
			lo, hi := float64(c)*unit, float64(c+1)*unit
			for bi < len(row) && row[bi].end <= lo {
				bi++
			}
			best, bestOv := -1, 0.0
			for j := bi; j < len(row) && row[j].start < hi; j++ {
				ov := min(hi, row[j].end) - max(lo, row[j].start)
				if ov > bestOv+1e-12 {
					best, bestOv = j, ov
				}
			}
			var cell string
			switch {
			case best < 0:
				cell = "."
			case best == prev:
				cell = strings.Repeat("-", cw-1)
			default:
				cell = row[best].label
				shown[row[best].kind] = true
			}
			prev = best
			g.WriteString(cell)
			if c < cols-1 {
				g.WriteString(strings.Repeat(" ", cw-len(cell)))
			}
		}
		g.WriteByte('\n')
	}

	var b strings.Builder
	name := p.Placement.Name
	if name == "" {
		name = "table"
	}
	fmt.Fprintf(&b, "P=%d S=%d M=%d (%s placement)  makespan %s  bubble %.3f (stage span %.3f)  peak activations %d\n",
		P, p.Stages(), p.Micro, name, formatNum(round9(r.Makespan)), r.Bubble, r.BubbleSpan, r.Peak())
	fmt.Fprintf(&b, "1 column = %s time unit(s); '.' idle, '-' the step goes on%s\n", formatNum(round9(unit)), gridLegend(shown))

	// Ruler: a time label every k columns, k the smallest step whose labels
	// all fit in their k columns with a space to spare.
	k := rulerStep(cols, cw, unit)
	longest := 0
	for c := 0; c <= cols; c += k {
		longest = max(longest, len(formatNum(round9(float64(c)*unit))))
	}
	ruler := []byte(strings.Repeat(" ", cols*cw+longest))
	for c := 0; c <= cols; c += k {
		copy(ruler[c*cw:], formatNum(round9(float64(c)*unit)))
	}
	b.WriteString(prefix("time"))
	b.WriteString(strings.TrimRight(string(ruler), " "))
	b.WriteByte('\n')

	b.WriteString(g.String())
	return b.String()
}

// gridLegend names the letters of the kinds shown other than the compute
// kinds (F, B, I, W, and the overlaps, whose cells show those), in
// abi's order: "; C RECOMPUTE, l GATHER_LOSS", or "" when there are none.
func gridLegend(shown map[ir.Kind]bool) string {
	var s strings.Builder
	for _, k := range abi.Kinds() {
		if !shown[k] || k.IsCompute() {
			continue
		}
		if s.Len() == 0 {
			s.WriteString("; ")
		} else {
			s.WriteString(", ")
		}
		s.WriteString(glyph(k) + " " + k.String())
	}
	return s.String()
}

// niceAtLeast returns the smallest of 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a
// power of ten that is ≥ v (v > 0).
func niceAtLeast(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*e >= v*(1-1e-12) {
			return m * e
		}
	}
	return 10 * e
}

// round9 rounds to 9 decimals, hiding float noise in printed times.
func round9(v float64) float64 { return math.Round(v*1e9) / 1e9 }

// rulerStep returns the number of columns between two time labels of the
// grid's ruler: the smallest of 1, 2, 4, 5, 10, 20, 40, 50, 100, ... such
// that every label (the time at columns 0, k, 2k, ... up to cols) is shorter
// than the k columns of width cw it heads, so neighbouring labels never touch.
func rulerStep(cols, cw int, unit float64) int {
	fits := func(k int) bool {
		for c := 0; c <= cols; c += k {
			if len(formatNum(round9(float64(c)*unit))) >= k*cw {
				return false
			}
		}
		return true
	}
	for e := 1; ; e *= 10 {
		for _, m := range []int{1, 2, 4, 5} {
			if k := m * e; k > cols || fits(k) {
				return max(k, 1)
			}
		}
	}
}
