package sim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

func TestGridGolden(t *testing.T) {
	var out strings.Builder
	c := DefaultCost()
	for _, tc := range []struct {
		name  string
		prog  ir.Program
		width int
	}{
		{"1f1b P=4 M=8", onef1bComm(4, 8), 0},
		{"gpipe P=4 M=4", naiveComm(gpipe(4, 4)), 0},
		{"1f1b split P=3 M=4", onef1b(3, 4, true), 0},
		{"1f1b P=8 M=32 width 100", onef1b(8, 32, false), 100},
		{"1f1b P=4 M=8 width 80 (1.5-unit columns)", onef1b(4, 8, false), 80},
	} {
		r := mustRun(t, tc.prog, c)
		out.WriteString("== " + tc.name + "\n")
		out.WriteString(Grid(r, tc.prog, tc.width))
	}
	golden(t, "grid.txt", []byte(out.String()))
}

func TestGridCells(t *testing.T) {
	p, _ := ir.ParseText("rank 0: 0F0 0F1 0B0 (0F2;0B1)OVERLAP_F_B 0B2\n")
	r := mustRun(t, p, DefaultCost())
	g := Grid(r, p, 0)
	lines := strings.Split(strings.TrimRight(g, "\n"), "\n")
	last := lines[len(lines)-1]
	if want := "rank 0 |F0   F1   B0   ---- F2B1 ---- B2   ----"; last != want {
		t.Errorf("row = %q\nwant  %q\n%s", last, want, g)
	}
	// Fit to width: never wider than asked.
	big := onef1b(8, 32, false)
	g = Grid(mustRun(t, big, DefaultCost()), big, 80)
	for _, l := range strings.Split(strings.TrimRight(g, "\n"), "\n")[2:] {
		if len(l) > 80 {
			t.Errorf("line of %d chars > 80: %q", len(l), l)
		}
	}
	// Empty programs do not panic.
	empty := ir.NewProgram(ir.Loop(2, 1), 0)
	r, err := Run(empty, DefaultCost())
	if err != nil {
		t.Fatal(err)
	}
	_ = Grid(r, empty, 40)
	_ = Grid(Result{}, ir.Program{}, 0)
}

func TestNiceAtLeast(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{{1, 1}, {1.2, 1.5}, {2.1, 2.5}, {3, 3}, {3.1, 4}, {7, 8}, {8.5, 10}, {0.33, 0.4}, {12, 15}, {0, 1}} {
		if got := niceAtLeast(tt.in); !near(got, tt.want) {
			t.Errorf("niceAtLeast(%g) = %g, want %g", tt.in, got, tt.want)
		}
	}
}

// TestGridRuler checks the time ruler at many widths: labels never touch,
// each stands at the column whose start time it names, and they are evenly
// spaced.
func TestGridRuler(t *testing.T) {
	progs := []ir.Program{onef1b(4, 8, false), onef1b(8, 32, false), gpipe(3, 5), onef1b(3, 7, true)}
	for pi, p := range progs {
		r := mustRun(t, p, uniformCost(1, 2, 1, 0))
		for width := 30; width <= 200; width += 7 {
			g := Grid(r, p, width)
			lines := strings.Split(g, "\n")
			var unit float64
			if _, err := fmt.Sscanf(lines[1], "1 column = %g", &unit); err != nil {
				t.Fatalf("prog %d width %d: no unit in %q", pi, width, lines[1])
			}
			ruler := lines[2]
			bar := strings.IndexByte(ruler, '|')
			body := ruler[bar+1:]
			cw := cellWidth(t, lines[3:], bar)
			var starts []int
			for i := 0; i < len(body); i++ {
				if body[i] != ' ' && (i == 0 || body[i-1] == ' ') {
					starts = append(starts, i)
				}
			}
			if len(starts) < 2 {
				continue
			}
			step := starts[1] - starts[0]
			for j, st := range starts {
				if st%cw != 0 {
					t.Errorf("prog %d width %d: label at offset %d is not at a column start (cell width %d): %q", pi, width, st, cw, ruler)
					break
				}
				if j > 0 && st-starts[j-1] != step {
					t.Errorf("prog %d width %d: uneven labels: %q", pi, width, ruler)
					break
				}
				end := strings.IndexByte(body[st:]+" ", ' ')
				var v float64
				fmt.Sscanf(body[st:st+end], "%g", &v)
				if want := float64(st/cw) * unit; !near(v, want) {
					t.Errorf("prog %d width %d: label %q at column %d, want %g: %q", pi, width, body[st:st+end], st/cw, want, ruler)
					break
				}
			}
		}
	}
}

// cellWidth infers the grid's cell width from its rank rows: the widest
// cell text plus one space.
func cellWidth(t *testing.T, rows []string, bar int) int {
	t.Helper()
	w := 0
	for _, row := range rows {
		if len(row) > bar {
			for _, f := range strings.Fields(row[bar+1:]) {
				w = max(w, len(f))
			}
		}
	}
	if w == 0 {
		t.Fatal("grid has no cells")
	}
	return w + 1
}

func TestRulerStep(t *testing.T) {
	for _, tt := range []struct {
		cols, cw int
		unit     float64
		want     int
	}{
		{34, 3, 1.5, 2}, // 0 3 6 ... instead of 0 1.5 3 4.5 colliding
		{33, 3, 1, 1},   // "10" fits in 3 columns
		{20, 4, 6, 1},   // "114" fits in 4
		{200, 3, 1, 2},  // "100" does not fit in 3: every other column
		{5, 3, 0.25, 2}, // 0 0.5 1 ...
		{0, 3, 1, 1},    // empty grid
		{3, 2, 1000, 4}, // k larger than cols: one label
	} {
		if got := rulerStep(tt.cols, tt.cw, tt.unit); got != tt.want {
			t.Errorf("rulerStep(%d, %d, %g) = %d, want %d", tt.cols, tt.cw, tt.unit, got, tt.want)
		}
	}
}
