package passes

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// withSlots renders a program as text with each chunk step's slot: "0F0@1".
func withSlots(p ir.Program) string {
	var b strings.Builder
	for r, steps := range p.Ranks {
		b.WriteString("rank " + strconv.Itoa(r) + ":")
		for _, st := range steps {
			b.WriteByte(' ')
			if st.Kind.IsOverlap() {
				b.WriteByte('(')
				for i, c := range st.Sub {
					if i > 0 {
						b.WriteByte(';')
					}
					b.WriteString(c.String() + "@" + strconv.Itoa(c.Slot))
				}
				b.WriteString(")" + st.Kind.String())
				if st.Slot != ir.None {
					b.WriteString("@" + strconv.Itoa(st.Slot))
				}
				continue
			}
			b.WriteString(st.String())
			if st.Slot != ir.None {
				b.WriteString("@" + strconv.Itoa(st.Slot))
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestAssignSlots(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		place string
		want  string
		slots []int
	}{
		{
			name: "1F1B P=2 M=2 lowered: a freed slot goes to the next chunk",
			in: "rank 0: 0F0 0SEND_F0 0F1 0RECV_B0 0SEND_F1 0B0 0RECV_B1 0B1\n" +
				"rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1",
			want: "rank 0: 0F0@0 0SEND_F0@0 0F1@1 0RECV_B0@0 0SEND_F1@1 0B0@0 0RECV_B1@1 0B1@1\n" +
				"rank 1: 1RECV_F0@0 1F0@0 1B0@0 1SEND_B0@0 1RECV_F1@0 1F1@0 1B1@0 1SEND_B1@0\n",
			slots: []int{2, 1},
		},
		{
			name:  "src keeps a colocated chunk live: (1,0) is read by 0B0, so 0F1 needs a third slot",
			in:    "rank 0: 0F0 1F0 1B0 0F1 0B0 1F1 1B1 0B1",
			place: "0,0",
			want:  "rank 0: 0F0@0 1F0@1 1B0@1 0F1@2 0B0@0 1F1@0 1B1@0 0B1@2\n",
			slots: []int{3},
		},
		{
			name:  "lowest free slot first",
			in:    "rank 0: 0F0 0F1 0F2 0B1 0F3 0B0 0B2 0B3",
			want:  "rank 0: 0F0@0 0F1@1 0F2@2 0B1@1 0F3@1 0B0@0 0B2@2 0B3@1\n",
			slots: []int{3},
		},
		{
			name:  "halves of an overlap never share a slot",
			in:    "rank 0: 0DATA_LOAD0 0F0 (0F1;0B0)OVERLAP_F_B 0B1",
			want:  "rank 0: 0DATA_LOAD0@0 0F0@0 (0F1@1;0B0@0)OVERLAP_F_B 0B1@1\n",
			slots: []int{2},
		},
		{
			name:  "split backward: the chunk lives until its W; stage-less steps get no slot",
			in:    "rank 0: 0F0 0I0 0F1 0W0 0I1 0W1 OPT_STEP",
			want:  "rank 0: 0F0@0 0I0@0 0F1@1 0W0@0 0I1@1 0W1@1 OPT_STEP\n",
			slots: []int{2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := mustParse(tc.in)
			if tc.place != "" {
				pl, err := ir.ParsePlacement(tc.place, len(in.Ranks), 0)
				if err != nil {
					t.Fatal(err)
				}
				in.Placement = pl
			}
			before := withSlots(in)
			got, slots, err := AssignSlots(in)
			if err != nil {
				t.Fatal(err)
			}
			if s := withSlots(got); s != tc.want {
				t.Errorf("got\n%swant\n%s", s, tc.want)
			}
			if !equalInts(slots, tc.slots) {
				t.Errorf("slots %v, want %v", slots, tc.slots)
			}
			if !equalInts(SlotCounts(got), tc.slots) {
				t.Errorf("SlotCounts %v, want %v", SlotCounts(got), tc.slots)
			}
			if withSlots(in) != before {
				t.Errorf("input modified:\n%s", withSlots(in))
			}
		})
	}
}

func TestAssignSlotsErrors(t *testing.T) {
	p := mustParse("rank 0: 0F0 0B0\nrank 1: 1F0 1B0")
	p.Ranks[0] = append(p.Ranks[0], ir.Compute(ir.Backward, 1, 0))
	if _, _, err := AssignSlots(p); err == nil || !strings.Contains(err.Error(), "slots: rank 0 step 2 (1B0): stage 1 lives on rank 1") {
		t.Errorf("err = %v", err)
	}
	p = mustParse("rank 0: 0F0 0B0")
	p.Ranks[0][1].Stage = 4
	if _, _, err := AssignSlots(p); err == nil || !strings.Contains(err.Error(), "stage 4 is outside 0..0") {
		t.Errorf("err = %v", err)
	}
}

func TestSrc(t *testing.T) {
	// V placement, P=2: rank 1 holds stages 1 and 2 (colocated), rank 0 stages 0 and 3.
	q, _, err := Lower(vshape(2, 2, false), Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := IndexSlots(q)
	for r, steps := range q.Ranks {
		for i, st := range steps {
			for k, c := range st.Computes() {
				want := -1
				switch {
				case c.Kind == ir.Forward && c.Stage == 2:
					want = x.Slot(1, c.Micro)
				case c.Kind.IsBackward() && c.Stage == 1:
					want = x.Slot(2, c.Micro)
				}
				if c.Slot != x.Slot(c.Stage, c.Micro) || c.Slot < 0 {
					t.Errorf("rank %d step %d %s: slot %d, index says %d", r, i, c, c.Slot, x.Slot(c.Stage, c.Micro))
				}
				if got := x.Src(c); got != want {
					t.Errorf("rank %d step %d %s: Src = %d, want %d", r, i, c, got, want)
				}
				if got, err := src(q, r, i, k); err != nil || got != want {
					t.Errorf("rank %d step %d %s: src(p, ...) = %d, %v; want %d", r, i, c, got, err, want)
				}
			}
		}
	}
	if want := x.Slot(1, 0); want < 0 {
		t.Fatal("chunk (1,0) has no slot")
	}
	if _, err := src(q, 0, 999, 0); err == nil {
		t.Error("src out of range: no error")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// src returns the `src` argument of compute step index on rank (sub-step sub
// of an overlap; sub is ignored otherwise), as SlotIndex.Src. It indexes the
// whole program on each call; build an IndexSlots once to ask many times.
func src(p ir.Program, rank, index, sub int) (int, error) {
	if rank < 0 || rank >= len(p.Ranks) || index < 0 || index >= len(p.Ranks[rank]) {
		return -1, fmt.Errorf("src: no step %d on rank %d", index, rank)
	}
	st := p.Ranks[rank][index]
	if st.Kind.IsOverlap() {
		if sub < 0 || sub >= len(st.Sub) {
			return -1, fmt.Errorf("src: rank %d step %d (%s) has no sub-step %d", rank, index, st, sub)
		}
		st = st.Sub[sub]
	}
	return IndexSlots(p).Src(st), nil
}
