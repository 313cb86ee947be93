package sim

import (
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
