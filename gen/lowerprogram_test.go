package gen

import (
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/verify"
)

// TestLowerProgramUserErrors: a program that is the user's mistake fails
// with verify's own error (its step numbers), never as an InternalError
// (a "please report" bug), and Malformed tells malformed programs from
// unsafe ones (incomplete ones included); a PyTorch-form program gets its
// implicit steps.
func TestLowerProgramUserErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		malformed  bool
		want       string
	}{
		{"compute-only, a backward missing", "rank 0: 0F0 0F1 0B1\n", false, "micro-batch 0's backward of stage 0 (0B0, or 0I0 then 0W0) is missing"},
		{"lowered, a backward missing", "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B1 0B1\nrank 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B1 1SEND_B1\n", false, "backward of stage 0 (0B0, or 0I0 then 0W0) is missing"},
		{"forward-only with OPT_STEP", "rank 0: 0F0 0SEND_F0 OPT_STEP\nrank 1: 1RECV_F0 1F0 OPT_STEP\n", true, "in a forward-only program (no backward anywhere): there are no gradients to step"},
		{"I without W", "rank 0: 0F0 0I0\n", false, "an I needs its W"},
		{"OPT_STEP on one rank", "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 OPT_STEP\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n", false, "OPT_STEP runs on every rank or on none"},
		{"OPT_STEP before the last compute", "rank 0: 0F0 OPT_STEP 0B0\n", false, "OPT_STEP must follow every compute step"},
		{"a compute order's ALL_REDUCE without -clip", "rank 0: 0F0 0B0 ALL_REDUCE OPT_STEP\nrank 1: 1F0 1B0 ALL_REDUCE OPT_STEP\n", false, "give -clip"},
		{"lowered, an ALL_REDUCE missing on rank 1", "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 ALL_REDUCE OPT_STEP\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0 OPT_STEP\n", false, "this rank posts 0 ALL_REDUCE, rank 0 posts 1"},
		{"crossed transfers", "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n", false, "deadlock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ir.ParseText(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			_, err = LowerProgram(p, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if errors.As(err, new(*InternalError)) || strings.Contains(err.Error(), "please report") {
				t.Errorf("a user's program reported as a ppgen bug: %v", err)
			}
			var ve *verify.Error
			got := errors.As(err, &ve) && ve.Malformed()
			if got != tc.malformed {
				t.Errorf("Malformed = %v, want %v (%v)", got, tc.malformed, err)
			}
		})
	}
}

// TestForwardOnlyPrograms: an order of forwards alone lowers as a
// forward-only program (no OPT_STEP added), compute-only or lowered.
func TestForwardOnlyPrograms(t *testing.T) {
	for _, text := range []string{"rank 0: 0F0 0F1\n", "rank 0: 0F0 0SEND_F0\nrank 1: 1RECV_F0 1F0\n"} {
		p, err := ir.ParseText(text)
		if err != nil {
			t.Fatal(err)
		}
		res, err := LowerProgram(p, Options{})
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if !res.Report.ForwardOnly || !res.Program.ForwardOnly() {
			t.Errorf("%q: not lowered as forward-only: %s", text, ir.FormatText(res.Program))
		}
		for _, steps := range res.Program.Ranks {
			for _, st := range steps {
				if st.Kind == ir.OptStep {
					t.Errorf("%q: OPT_STEP added to a forward-only program", text)
				}
			}
		}
	}
}

// TestAddImplicitSteps: a lowered program without data steps and OPT_STEP
// gets both; one that has them, or has OPT_STEP on some ranks, is left to
// verify.
func TestAddImplicitSteps(t *testing.T) {
	bare := "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n"
	for _, tc := range []struct {
		text string
		want string
		n    int
	}{
		{bare, "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 OPT_STEP\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0 OPT_STEP\n", 4},
		{"rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 OPT_STEP\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0 OPT_STEP\n", "", 0},
		{"rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 OPT_STEP\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n", "rank 0: 0DATA_LOAD0 0F0 0SEND_F0 0RECV_B0 0B0 OPT_STEP\nrank 1: 1RECV_F0 1DATA_LOAD0 1F0 1B0 1SEND_B0\n", 2},
	} {
		p, err := ir.ParseText(tc.text)
		if err != nil {
			t.Fatal(err)
		}
		q, n := AddImplicitSteps(p)
		want := tc.want
		if want == "" {
			want = tc.text
		}
		if got := ir.FormatText(q); got != want || n != tc.n {
			t.Errorf("AddImplicitSteps(%q) = %q, %d; want %q, %d", tc.text, got, n, want, tc.n)
		}
	}
}

// TestLimitsAgree: the program limits fit the packed step argument's
// (abi.MaxIndex, which ir.MaxIndex is) and each other.
func TestLimitsAgree(t *testing.T) {
	if ir.MaxChunks > (ir.MaxIndex+1)*(ir.MaxIndex+1) || ir.MaxSteps < 16*ir.MaxChunks {
		t.Errorf("MaxChunks %d, MaxSteps %d out of proportion", ir.MaxChunks, ir.MaxSteps)
	}
}
