package ir

import (
	"fmt"
	"strings"
	"testing"
)

func TestStepRoundTrip(t *testing.T) {
	tests := []struct {
		text string
		want Step
	}{
		{"0F1", Compute(Forward, 0, 1)},
		{"3I2", Compute(BackwardInput, 3, 2)},
		{"3W2", Compute(BackwardWeight, 3, 2)},
		{"12B30", Compute(Backward, 12, 30)},
		{"2SEND_F3", Compute(SendF, 2, 3)},
		{"4RECV_B0", Compute(RecvB, 4, 0)},
		{"1UNSHARD", StageOnly(Unshard, 1)},
		{"0REDUCE_GRAD", StageOnly(ReduceGrad, 0)},
		{"0DATA_LOAD5", Compute(DataLoad, 0, 5)},
		{"2SWAP_LAUNCH_OFFLOAD1", Compute(SwapLaunchOffload, 2, 1)},
		{"(0F7;7B3)OVERLAP_F_B", Overlap(OverlapFB, Compute(Forward, 0, 7), Compute(Backward, 7, 3))},
		{"(1I2;1F3)OVERLAP_B_F", Overlap(OverlapBF, Compute(BackwardInput, 1, 2), Compute(Forward, 1, 3))},
		{"OPT_STEP", Step{Kind: OptStep, Stage: None, Micro: None, Peer: None, Slot: None}},
	}
	for _, tc := range tests {
		got, err := ParseStep(tc.text)
		if err != nil {
			t.Errorf("ParseStep(%q): %v", tc.text, err)
			continue
		}
		if !got.Equal(tc.want) {
			t.Errorf("ParseStep(%q) = %+v, want %+v", tc.text, got, tc.want)
		}
		if s := got.String(); s != tc.text {
			t.Errorf("String() = %q, want %q", s, tc.text)
		}
	}
}

func TestParseStepAliases(t *testing.T) {
	for text, want := range map[string]string{
		"0FWD1":        "0F1",
		"0BWD1":        "0B1",
		"2BWD_INPUT3":  "2I3",
		"2BWD_WEIGHT3": "2W3",
		"1FWD_SEND0":   "1SEND_F0",
		"1FWD_RECV0":   "1RECV_F0",
		"1BWD_SEND0":   "1SEND_B0",
		"1BWD_RECV0":   "1RECV_B0",
	} {
		got, err := ParseStep(text)
		if err != nil {
			t.Errorf("ParseStep(%q): %v", text, err)
			continue
		}
		if got.String() != want {
			t.Errorf("ParseStep(%q) = %s, want %s", text, got, want)
		}
	}
}

func TestParseStepErrors(t *testing.T) {
	tests := []struct{ text, want string }{
		{"", "empty step"},
		{"0X1", `unknown step kind "X"`},
		{"F1", "needs a leading stage number"},
		{"0F", "needs a trailing micro-batch number"},
		{"0UNSHARD3", "takes no micro-batch number"},
		{"3OPT_STEP", "takes no stage number"},
		{"(0F1)OVERLAP_F_B", "exactly two sub-steps"},
		{"(0F1;1SEND_F1)OVERLAP_F_B", "must be F, B, I or W"},
		{"(0F1;1B1", "unclosed"},
		{"OVERLAP_B_F", "needs its two sub-steps in parentheses"},
		{"0OVERLAP_F_B1", "needs its two sub-steps in parentheses"},
		{"(0F1;1B1)F", "OVERLAP_F_B or OVERLAP_B_F"},
	}
	for _, tc := range tests {
		_, err := ParseStep(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseStep(%q) error = %v, want it to contain %q", tc.text, err, tc.want)
		}
	}
}

const twoRanks = `rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
rank 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1
`

func TestTextRoundTrip(t *testing.T) {
	p, err := ParseText(twoRanks)
	if err != nil {
		t.Fatal(err)
	}
	if p.Micro != 2 || p.Stages() != 2 || p.Placement.Name != "loop" {
		t.Fatalf("inferred M=%d S=%d placement=%s; want 2, 2, loop", p.Micro, p.Stages(), p.Placement)
	}
	if got := p.Ranks[0][1].Peer; got != 1 {
		t.Errorf("SEND_F peer = %d, want 1", got)
	}
	if got := p.Ranks[1][5].Peer; got != 0 {
		t.Errorf("SEND_B peer = %d, want 0", got)
	}
	if got := FormatText(p); got != twoRanks {
		t.Errorf("FormatText round trip:\n%s\nwant\n%s", got, twoRanks)
	}
}

func TestCSVRoundTrip(t *testing.T) {
	p, err := ParseText(twoRanks)
	if err != nil {
		t.Fatal(err)
	}
	csv := FormatCSV(p)
	q, err := ParseCSV(strings.NewReader(string(csv)))
	if err != nil {
		t.Fatal(err)
	}
	if FormatText(q) != twoRanks {
		t.Errorf("CSV round trip gave\n%s", FormatText(q))
	}
	for r := range p.Ranks {
		for i := range p.Ranks[r] {
			if !p.Ranks[r][i].Equal(q.Ranks[r][i]) {
				t.Errorf("rank %d step %d: %+v != %+v", r, i, p.Ranks[r][i], q.Ranks[r][i])
			}
		}
	}
}

func TestCSVIdleCellsAndPlacement(t *testing.T) {
	// A V-shaped compute-only schedule with idle cells, as PyTorch dumps it.
	in := "0F0,,3F0,3B0,,0B0\n1F0,2F0,,2B0,1B0,\n"
	p, err := ParseCSV(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if p.Placement.Name != "v" || p.Placement.Ranks() != 2 || p.Stages() != 4 {
		t.Fatalf("placement %s ranks %d stages %d; want v, 2, 4", p.Placement, p.Placement.Ranks(), p.Stages())
	}
	if len(p.Ranks[0]) != 4 || len(p.Ranks[1]) != 4 {
		t.Fatalf("idle cells not dropped: %v", FormatText(p))
	}
}

func TestInferErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "no ranks"},
		{"0F0\n0B0\n", "also runs on rank 0"},
		{"0F0\n2F0\n", "stage 1 has no compute step"},
		{"0F0,0SEND_F0\n", "stage 0 has no neighbour"},
		{"0F0,0Q1\n", "line 1 cell 2"},
	}
	for _, tc := range tests {
		_, err := ParseCSV(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseCSV(%q) error = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestPlacements(t *testing.T) {
	v := VShape(4)
	if got := v.String(); got != "v" {
		t.Errorf("VShape name %q", got)
	}
	if got, want := v.StagesOf(1), []int{1, 6}; !equalInts(got, want) {
		t.Errorf("VShape(4).StagesOf(1) = %v, want %v", got, want)
	}
	l := Loop(3, 2)
	if got, want := l.StagesOf(2), []int{2, 5}; !equalInts(got, want) {
		t.Errorf("Loop(3,2).StagesOf(2) = %v, want %v", got, want)
	}
	if l.Virtual() != 2 || v.Virtual() != 2 {
		t.Errorf("Virtual: loop %d v %d", l.Virtual(), v.Virtual())
	}
	z := Zigzag(3, 4)
	if got, want := z.String(), "0,1,2,2,1,0,0,1,2,2,1,0"; got != want {
		t.Errorf("Zigzag(3, 4) = %s, want %s", got, want)
	}
	if got, want := z.StagesOf(0), []int{0, 5, 6, 11}; !equalInts(got, want) || z.Virtual() != 4 {
		t.Errorf("Zigzag(3, 4).StagesOf(0) = %v (virtual %d), want %v (4)", got, z.Virtual(), want)
	}
	if Zigzag(4, 2).String() != "v" || Zigzag(4, 1).String() != "loop" {
		t.Errorf("Zigzag(4, 2) = %s, Zigzag(4, 1) = %s; want v and loop", Zigzag(4, 2), Zigzag(4, 1))
	}
	if _, err := Table(2, []int{0, 0}); err == nil || !strings.Contains(err.Error(), "rank 1 holds no stage") {
		t.Errorf("Table error = %v", err)
	}
	if _, err := ParsePlacement("0,x", 2, 1); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("ParsePlacement error = %v", err)
	}
	if p, err := ParsePlacement("0,1,1,0", 2, 2); err != nil || p.Rank(3) != 0 {
		t.Errorf("ParsePlacement table: %v %v", p, err)
	}
}

func TestRoute(t *testing.T) {
	p := NewProgram(VShape(4), 8) // 8 stages
	for m := range 8 {
		if f, l := p.Route(m); f != 0 || l != 7 {
			t.Errorf("one pipeline: Route(%d) = %d, %d; want 0, 7", m, f, l)
		}
	}
	p.Copies = 2
	for _, tc := range []struct{ m, first, last int }{{0, 0, 3}, {3, 0, 3}, {4, 4, 7}, {7, 4, 7}, {-1, 0, 7}, {8, 0, 7}} {
		if f, l := p.Route(tc.m); f != tc.first || l != tc.last {
			t.Errorf("two copies: Route(%d) = %d, %d; want %d, %d", tc.m, f, l, tc.first, tc.last)
		}
	}
	if !p.Runs(3, 1) || p.Runs(4, 1) || !p.Runs(4, 5) || p.Runs(3, 5) {
		t.Error("Runs disagrees with Route")
	}
	if q := p.Clone(); q.Copies != 2 || p.ComputeOnly().Copies != 2 {
		t.Error("Clone or ComputeOnly dropped Copies")
	}
	p.Copies = 3 // does not divide: one pipeline
	if f, l := p.Route(5); f != 0 || l != 7 {
		t.Errorf("Copies = 3: Route(5) = %d, %d; want 0, 7", f, l)
	}
}

func TestInferCopies(t *testing.T) {
	for _, tc := range []struct {
		text   string
		copies int
	}{
		// dualpipe's shape: micros 0 and 1 run stages 0-1, micros 2 and 3 stages 2-3.
		{"rank 0: 0F0 0F1 3F2 3F3 0B0 0B1 3B2 3B3\nrank 1: 1F0 1F1 2F2 2F3 1B0 1B1 2B2 2B3\n", 2},
		{"rank 0: 0F0 0B0 1F0 1B0\n", 0},
		{"rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F1 1B1\n", 0}, // micro 0 misses stage 1: incomplete, not copies
		{"rank 0: 0F0 1F1 2F2 0B0 1B1 2B2\n", 0},          // three groups: not a copy count the runtime runs
		{"rank 0: 0F0 0F1 1F2 1F3 0B0 0B1 1B2 1B3\n", 2},  // colocated copies
		{"rank 0: 0F0 0F1 0F2 1F3 0B0 0B1 0B2 1B3\n", 0},  // uneven halves
	} {
		p, err := ParseText(tc.text)
		if err != nil {
			t.Fatalf("%q: %v", tc.text, err)
		}
		if p.Copies != tc.copies {
			t.Errorf("%q: Copies = %d, want %d", tc.text, p.Copies, tc.copies)
		}
	}
}

func TestParseLimits(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"rank 0: 0F65535\n", "micro-batch 65535 is over the limit of 65534"},
		{"rank 0: 65535F0\n", "stage 65535 is over the limit of 65534"},
		{"rank 0: 0F99999999999999999999999\n", "micro-batch 99999999999999999999999 is over the limit"},
		{"rank 0: 0F0 0B0 200F200 200B200\n", "stages × micro-batches (201 × 201) = 40401 is over the limit of 32768"},
		{"rank 0: 0F0 " + strings.Repeat("x", MaxStepBytes+1) + "\n", "a step is at most 128 bytes long"},
		{"rank 0: " + strings.Repeat(" ", MaxLineBytes) + "\n", "the line is longer than 16777216 bytes"},
	} {
		_, err := ParseText(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseText(%.40q...) = %v, want %q", tc.in, err, tc.want)
		} else if len(err.Error()) > 300 {
			t.Errorf("error of %d bytes: %.100q", len(err.Error()), err)
		}
	}
	// The largest micro number parses; the program is then over the chunk limit.
	if _, err := ParseText("rank 0: 0F65534 0B65534\n"); err == nil || !strings.Contains(err.Error(), "(1 × 65535) = 65535 is over the limit of 32768") {
		t.Errorf("the largest micro number: %v", err)
	}
}

// TestParseStepEveryForm: every kind in every form of the grammar (bare,
// with a stage, a micro or both, after a parenthesised pair) is refused or
// prints as text that parses back to the same step; the fuzz targets search
// around these, this checks each once (a bare OVERLAP_B_F printed as
// "()OVERLAP_B_F" until issue 35).
func TestParseStepEveryForm(t *testing.T) {
	for _, k := range Kinds() {
		for _, form := range []string{"%s", "0%s", "%s1", "0%s1", "(0F1;0B0)%s"} {
			in := fmt.Sprintf(form, k)
			s, err := ParseStep(in)
			if err != nil {
				continue
			}
			out := s.String()
			again, err := ParseStep(out)
			if err != nil || !again.Equal(s) {
				t.Errorf("ParseStep(%q) = %v, printed %q, read back as %v (%v)", in, s, out, again, err)
			}
		}
	}
}
