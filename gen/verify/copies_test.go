package verify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/verify"
)

// dualPipe returns dualpipe's compute order on 4 ranks with 8 micro-batches
// (Copies = 2: micros 0..3 run stages 0..3, micros 4..7 stages 4..7) and its
// lowered program.
func dualPipe(t *testing.T) (compute, lowered ir.Program) {
	t.Helper()
	compute, err := schedules.Build(ir.Config{Schedule: "dualpipe", Ranks: 4, Micro: 8})
	if err != nil {
		t.Fatal(err)
	}
	if compute.Copies != 2 {
		t.Fatalf("dualpipe: Copies = %d, want 2", compute.Copies)
	}
	lowered, _, err = passes.Lower(compute, passes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return compute, lowered
}

// dropChunk returns p without the steps of chunk (s, m); an overlap holding
// one of them keeps its other sub-step as a plain step.
func dropChunk(p ir.Program, s, m int) ir.Program {
	q := p.Clone()
	of := func(st ir.Step) bool { return st.Stage == s && st.Micro == m && st.Kind.HasMicro() }
	for r, steps := range q.Ranks {
		out := steps[:0]
		for _, st := range steps {
			if st.Kind.IsOverlap() {
				switch {
				case of(st.Sub[0]):
					out = append(out, st.Sub[1])
				case of(st.Sub[1]):
					out = append(out, st.Sub[0])
				default:
					out = append(out, st)
				}
				continue
			}
			if !of(st) {
				out = append(out, st)
			}
		}
		q.Ranks[r] = out
	}
	return q
}

func wantError(t *testing.T, what string, p ir.Program, code verify.Code, reason string) {
	t.Helper()
	_, err := verify.Check(p, verify.Options{})
	var ve *verify.Error
	if !errors.As(err, &ve) || ve.Code != code || !strings.Contains(ve.Reason, reason) {
		t.Errorf("%s: Check = %v, want a %v error containing %q", what, err, code, reason)
	}
}

func TestCheckCopies(t *testing.T) {
	compute, lowered := dualPipe(t)
	for _, p := range []ir.Program{compute, lowered} {
		if _, err := verify.Check(p, verify.Options{}); err != nil {
			t.Fatalf("dualpipe (lowered %v): %v", p.HasComm(), err)
		}
	}

	// Copy B's micro 4 on copy A's stage 0 (rank 0): its F(0, 0) renamed.
	for _, p := range []ir.Program{compute, lowered} {
		q := p.Clone()
		done := false
		for i, st := range q.Ranks[0] {
			if st.Kind == ir.Forward && st.Stage == 0 && st.Micro == 0 {
				q.Ranks[0][i].Micro = 4
				done = true
			}
		}
		if !done {
			t.Fatal("no plain F(0, 0) on rank 0")
		}
		wantError(t, "copy B's micro on copy A's stage", q, verify.Structure, "micro-batch 4 runs only stages 4..7")
	}

	// A missing chunk of a route: copy B's last stage (7, on rank 0) of micro
	// 5, and copy A's last stage (3, on rank 3) of micro 1.
	for _, ch := range [][2]int{{7, 5}, {3, 1}} {
		wantError(t, "compute order without a chunk", dropChunk(compute, ch[0], ch[1]), verify.Missing, "never runs")
	}

	// Without Copies the program is one pipeline, whose edge 3 -> 4 it does
	// not run: copy B's first stage has no input.
	q := compute.Clone()
	q.Copies = 0
	wantError(t, "Copies = 0", q, verify.Order, "3F4 must come earlier")
	q.Copies = 3
	wantError(t, "Copies = 3", q, verify.Structure, "3 model copies do not split 8 stages")
}

// TestCopiesExchangeAtOptStep: with model copies, OPT_STEP is a rendezvous
// with the twin ranks (runtime/pipe sums the copies' gradients there), so
// an OPT_STEP moved before a transfer that its twin still waits for is a
// deadlock. Before the exchange was in the strict model, verify accepted
// such a program, and runtime/pipe hung on it (every rank "no progress").
func TestCopiesExchangeAtOptStep(t *testing.T) {
	_, lowered := dualPipe(t)
	if _, err := verify.Check(lowered, verify.Options{}); err != nil {
		t.Fatalf("dualpipe as lowered: %v", err)
	}
	// Each transfer of a rank moved to just after the rank's OPT_STEP:
	// the rank then meets its twin at OPT_STEP with that transfer still to
	// come.
	moved, refused := 0, 0
	var first error
	for r, steps := range lowered.Ranks {
		opt := -1
		for i, st := range steps {
			if st.Kind == ir.OptStep {
				opt = i
			}
		}
		for i := range opt {
			if !steps[i].Kind.IsComm() {
				continue
			}
			q := lowered.Clone()
			rs := append([]ir.Step(nil), q.Ranks[r][:i]...)
			rs = append(rs, q.Ranks[r][i+1:opt+1]...)
			rs = append(rs, q.Ranks[r][i])
			q.Ranks[r] = append(rs, q.Ranks[r][opt+1:]...)
			moved++
			_, err := verify.Check(q, verify.Options{})
			var dl *verify.DeadlockError
			if errors.As(err, &dl) && strings.Contains(err.Error(), "OPT_STEP") {
				refused++
				if first == nil {
					first = err
				}
			}
		}
	}
	if refused == 0 {
		t.Fatalf("none of %d programs with a transfer moved after OPT_STEP is a deadlock at an OPT_STEP; the twins' exchange is not in the model", moved)
	}
	t.Logf("%d of %d transfers moved after OPT_STEP deadlock there; the first: %v", refused, moved, first)
}
