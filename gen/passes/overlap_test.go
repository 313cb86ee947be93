package passes

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/verify"
)

func TestOverlap(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"1f1b", "rank 0: 0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3\nrank 1: 1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3",
			"rank 0: 0F0 0F1 (0B0;0F2)OVERLAP_B_F (0B1;0F3)OVERLAP_B_F 0B2 0B3\n" +
				"rank 1: 1F0 (1B0;1F1)OVERLAP_B_F (1B1;1F2)OVERLAP_B_F (1B2;1F3)OVERLAP_B_F 1B3\n"},
		{"gpipe unchanged", "rank 0: 0F0 0F1 0B0 0B1", "rank 0: 0F0 0F1 0B0 0B1\n"},
		{"I pairs, W does not", "rank 0: 0F0 0I0 0F1 0W0 0I1 0W1", "rank 0: 0F0 (0I0;0F1)OVERLAP_B_F 0W0 0I1 0W1\n"},
		{"existing overlaps kept", "rank 0: 0F0 (0F1;0B0)OVERLAP_F_B 0F2 0B1 0F3 0B2 0B3",
			"rank 0: 0F0 (0F1;0B0)OVERLAP_F_B 0F2 (0B1;0F3)OVERLAP_B_F 0B2 0B3\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(tt.in)
			before := ir.FormatText(p)
			q, err := Overlap(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := rankLines(q); got != tt.want {
				t.Errorf("Overlap:\n%s\nwant\n%s", got, tt.want)
			}
			if ir.FormatText(p) != before {
				t.Error("Overlap modified its input")
			}
		})
	}
}

// TestOverlapInterleavedShape: on interleaved 1F1B every rank's order
// becomes warm-up forwards, F, (B;F)... , B, cool-down backwards: the
// steady state of n forward-backward pairs gives n-1 overlaps, each pairing
// the k-th steady backward with the (k+1)-th steady forward.
func TestOverlapInterleavedShape(t *testing.T) {
	for _, P := range []int{1, 2, 4} {
		for _, V := range []int{1, 2, 3} {
			for _, M := range []int{1, P, 2 * P, 3*P + 1} {
				p, err := schedules.Build(ir.Config{Schedule: "interleaved", Ranks: P, Virtual: V, Micro: M})
				if err != nil {
					t.Fatal(err)
				}
				q, err := Overlap(p)
				if err != nil {
					t.Fatal(err)
				}
				for r, steps := range p.Ranks {
					// The steady state: maximal run of alternating F, B after the warm-up.
					warm := 0
					for warm < len(steps) && steps[warm].Kind == ir.Forward {
						warm++
					}
					pairs := 0 // steady-state (F, B) pairs: F at warm-1, B at warm, ...
					for i := warm - 1; i+1 < len(steps) && i >= 0 && steps[i].Kind == ir.Forward && steps[i+1].Kind == ir.Backward; i += 2 {
						pairs++
					}
					var want []ir.Step
					want = append(want, steps[:warm]...)
					for k := 0; k+1 < pairs; k++ {
						want = append(want, ir.Overlap(ir.OverlapBF, steps[warm+2*k], steps[warm+2*k+1]))
					}
					want = append(want, steps[min(len(steps), warm+2*max(pairs-1, 0)):]...)
					if got := q.Ranks[r]; !slices.EqualFunc(got, want, ir.Step.Equal) {
						t.Fatalf("P=%d V=%d M=%d rank %d:\n got %v\nwant %v", P, V, M, r, got, want)
					}
				}
			}
		}
	}
}

func TestDxDwInOverlap(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"B in overlaps", "rank 0: 0F0 0F1 (0B0;0F2)OVERLAP_B_F (0F3;0B1)OVERLAP_F_B 0B2 0B3",
			"rank 0: 0F0 0F1 (0I0;0F2)OVERLAP_B_F 0W0 (0F3;0I1)OVERLAP_F_B 0W1 0B2 0B3\n"},
		{"I and W halves kept", "rank 0: 0F0 0I0 0F1 (0W0;0F2)OVERLAP_B_F (0I1;0F3)OVERLAP_B_F 0W1 0B2 0B3",
			"rank 0: 0F0 0I0 0F1 (0W0;0F2)OVERLAP_B_F (0I1;0F3)OVERLAP_B_F 0W1 0B2 0B3\n"},
		{"no overlaps", "rank 0: 0F0 0B0", "rank 0: 0F0 0B0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(tt.in)
			before := ir.FormatText(p)
			q, err := DxDwInOverlap(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := rankLines(q); got != tt.want {
				t.Errorf("DxDwInOverlap:\n%s\nwant\n%s", got, tt.want)
			}
			if ir.FormatText(p) != before {
				t.Error("DxDwInOverlap modified its input")
			}
		})
	}
}

// TestLowerOptions: Lower runs the compute-order passes in the documented
// order, and the result verifies.
func TestLowerOptions(t *testing.T) {
	p := oneF1B(3, 6)
	tests := []struct {
		opt    Options
		passes string
	}{
		{Options{Split: true}, "split,data+comm,opt,slots"},
		{Options{Overlap: true}, "overlap,data+comm,opt,slots"},
		{Options{Overlap: true, DxDwInOverlap: true}, "overlap,dxdw,data+comm,opt,slots"},
		{Options{Overlap: true, DxDwInOverlap: true, Split: true, NoData: true}, "overlap,dxdw,split,comm,opt,slots"},
	}
	for _, tt := range tests {
		q, info, err := Lower(p, tt.opt)
		if err != nil {
			t.Fatalf("%+v: %v", tt.opt, err)
		}
		if got := strings.Join(info.Passes, ","); got != tt.passes {
			t.Errorf("%+v: passes %s, want %s", tt.opt, got, tt.passes)
		}
		if _, err := verify.Check(q, verify.Options{}); err != nil {
			t.Errorf("%+v: %v", tt.opt, err)
		}
	}
	// dx/dw split of overlaps the order does not have: refused up front by
	// CheckOptions and in Lower.
	if err := CheckOptions(p, Options{DxDwInOverlap: true}); err == nil {
		t.Error("CheckOptions accepted dx/dw split without overlaps")
	}
	for _, ok := range []Options{{}, {Overlap: true, DxDwInOverlap: true}, {Split: true}} {
		if err := CheckOptions(p, ok); err != nil {
			t.Errorf("CheckOptions(%+v): %v", ok, err)
		}
	}
	withOverlaps, _ := Overlap(p)
	if err := CheckOptions(withOverlaps, Options{DxDwInOverlap: true}); err != nil {
		t.Errorf("CheckOptions on an order with overlaps: %v", err)
	}
	_, _, err := Lower(p, Options{DxDwInOverlap: true})
	if err == nil || !strings.HasPrefix(err.Error(), "lowering (pass dxdw): dxdw: dxdw-in-overlap splits the backward inside overlap steps, and this compute order has none") {
		t.Errorf("err = %v", err)
	}
}

// TestGradSendBetweenDxAndDw: with overlap and dx/dw split, every overlapped
// backward of a family's order is lowered as (I;F) or (F;I), then the
// gradient send of the I (when the previous stage is on another rank), then
// its W, with only transfers between them, for both the timed and the late
// comm order; the program verifies.
func TestGradSendBetweenDxAndDw(t *testing.T) {
	checked := 0
	for _, tc := range []struct {
		schedule string
		opt      Options
	}{
		{"interleaved", Options{Overlap: true, DxDwInOverlap: true}},
		{"1f1b", Options{Overlap: true, DxDwInOverlap: true}},
		{"dualpipev", Options{DxDwInOverlap: true}},
		{"interleaved", Options{Overlap: true, Split: true}},
	} {
		for _, P := range []int{2, 3, 4} {
			for _, M := range []int{P, 2 * P, 3*P + 1} {
				p, err := schedules.Build(ir.Config{Schedule: tc.schedule, Ranks: P, Micro: M})
				if err != nil {
					continue
				}
				for _, order := range []CommOrder{Timed, Late} {
					opt := tc.opt
					opt.Comm.Order = order
					name := fmt.Sprintf("%s P=%d M=%d %+v", tc.schedule, P, M, opt)
					q, _, err := Lower(p, opt)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if _, err := verify.Check(q, verify.Options{}); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					rankOf := q.Placement.RankOf
					for r, steps := range q.Ranks {
						for i, st := range steps {
							if !st.Kind.IsOverlap() {
								continue
							}
							var in ir.Step
							for _, c := range st.Sub {
								if c.Kind == ir.BackwardInput {
									in = c
								}
							}
							if in.Kind != ir.BackwardInput {
								t.Fatalf("%s: rank %d step %d %s: the backward half is not an I", name, r, i, st)
							}
							sent := in.Stage == 0 || rankOf[in.Stage-1] == r // no send needed
							j := i + 1
							for ; j < len(steps) && steps[j].Kind.IsComm(); j++ {
								if steps[j].Kind == ir.SendB && steps[j].Stage == in.Stage && steps[j].Micro == in.Micro {
									sent = true
								}
							}
							if j == len(steps) || steps[j].Kind != ir.BackwardWeight || steps[j].Stage != in.Stage || steps[j].Micro != in.Micro || !sent {
								t.Fatalf("%s: rank %d: %s is not followed by its gradient send and then its W:\n%v", name, r, st, steps[i:min(len(steps), i+6)])
							}
							checked++
						}
					}
				}
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d overlaps checked", checked)
	}
}
