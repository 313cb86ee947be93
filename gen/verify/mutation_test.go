package verify_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/verify"
)

// mutate applies one random mutation: swap two adjacent steps, drop a
// transfer, duplicate a transfer at a random place on its rank, or move a
// transfer to a random place on its rank (the latter makes most deadlocks
// and FIFO mismatches). It
// returns a description, or "" when the program offers nothing to mutate.
func mutate(rng *rand.Rand, p *ir.Program, commOnly bool) string {
	r := rng.IntN(len(p.Ranks))
	steps := p.Ranks[r]
	var comm []int
	for i, st := range steps {
		if st.Kind.IsComm() {
			comm = append(comm, i)
		}
	}
	kind := rng.IntN(4)
	if commOnly || len(comm) == 0 {
		kind = 0
	}
	switch kind {
	case 0:
		if len(steps) < 2 {
			return ""
		}
		i := rng.IntN(len(steps) - 1)
		steps[i], steps[i+1] = steps[i+1], steps[i]
		return fmt.Sprintf("rank %d: swap steps %d and %d (%s, %s)", r, i, i+1, steps[i+1], steps[i])
	case 1:
		i := comm[rng.IntN(len(comm))]
		st := steps[i]
		p.Ranks[r] = append(steps[:i:i], steps[i+1:]...)
		return fmt.Sprintf("rank %d: drop step %d (%s)", r, i, st)
	case 3:
		i := comm[rng.IntN(len(comm))]
		st := steps[i]
		rest := append(steps[:i:i], steps[i+1:]...)
		j := rng.IntN(len(rest) + 1)
		out := make([]ir.Step, 0, len(steps))
		out = append(out, rest[:j]...)
		out = append(out, st)
		p.Ranks[r] = append(out, rest[j:]...)
		return fmt.Sprintf("rank %d: move step %d (%s) to %d", r, i, st, j)
	default:
		i := comm[rng.IntN(len(comm))]
		st := steps[i]
		j := rng.IntN(len(steps) + 1)
		out := make([]ir.Step, 0, len(steps)+1)
		out = append(out, steps[:j]...)
		out = append(out, st)
		p.Ranks[r] = append(out, steps[j:]...)
		return fmt.Sprintf("rank %d: duplicate step %d (%s) at %d", r, i, st, j)
	}
}

// TestNaiveAgreesOnFixtures checks the independent checker itself on valid
// programs and on the hand-made unsafe ones.
func TestNaiveAgreesOnFixtures(t *testing.T) {
	for P := 1; P <= 4; P++ {
		for _, p := range []ir.Program{oneF1B(P, 2*P), gpipe(P, P), zbLike(P, P+1), vshape(P, P, true)} {
			if why := runNaive(p); why != "" {
				t.Fatalf("compute-only fixture: %s\n%s", why, ir.FormatText(p))
			}
			q, _, err := passes.Lower(p, passes.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if why := runNaive(q); why != "" {
				t.Fatalf("lowered fixture: %s\n%s", why, ir.FormatText(q))
			}
		}
	}
}

// TestMutations: random mutations of valid lowered programs are rejected by
// verify exactly when the independent checker says running them hangs or
// breaks.
func TestMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var accepted, rejected, hung, broke, batched int
	trials := 0
	for P := 2; P <= 6; P++ {
		for M := 1; M <= 2*P; M++ {
			bases := map[string]ir.Program{
				"1f1b":        oneF1B(P, M),
				"gpipe":       gpipe(P, M),
				"zb":          zbLike(P, M),
				"interleaved": interleaved(P, 2, M),
				"v":           vshape(P, M, M%2 == 0),
			}
			for name, base := range bases {
				// Eager and timed comm orders; with the timed one also the
				// labels shipped along the pipe, for interleaved mpipe's
				// owned-micro loading, and batches.
				// Variant 4 batches adjacent transfers (-batch).
				for variant := range 5 {
					eager := variant == 1
					opt := passes.Options{NoOptStep: true, Comm: passes.CommOptions{Order: orderOf(eager)}, ShipLabels: variant == 2, OwnedData: variant == 3, Batch: variant == 4}
					if variant == 3 && name != "interleaved" {
						continue
					}
					low, _, err := passes.Lower(base, opt)
					if err != nil {
						t.Fatalf("%s P=%d M=%d variant %d: %v", name, P, M, variant, err)
					}
					for k := 0; k < 10; k++ {
						p := low.Clone()
						desc := mutate(rng, &p, false)
						if k%4 == 3 { // sometimes two mutations
							desc += "; " + mutate(rng, &p, false)
						}
						trials++
						why := runNaive(p)
						_, err := verify.Check(p, verify.Options{})
						if (err == nil) != (why == "") {
							t.Fatalf("%s P=%d M=%d eager=%v, %s:\nverify: %v\nnaive:  %q\n%s", name, P, M, eager, desc, err, why, ir.FormatText(p))
						}
						switch {
						case err == nil && variant == 4:
							accepted++
							batched++
						case err == nil:
							accepted++
						case why[:5] == "hangs":
							rejected++
							hung++
						default:
							rejected++
							broke++
						}
					}
				}
			}
		}
	}
	t.Logf("%d mutants: %d accepted by both (%d batched), %d rejected by both (%d hang, %d break)", trials, accepted, batched, rejected, hung, broke)
	if accepted == 0 || hung == 0 || broke == 0 || batched == 0 {
		t.Errorf("mutation mix too narrow: %d accepted (%d batched), %d hang, %d break", accepted, batched, hung, broke)
	}
}

// TestComputeOnlyMutations: adjacent swaps in compute-only orders (local
// order errors and cross-rank cycles) get the same verdict from both.
func TestComputeOnlyMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var accepted, rejected int
	for iter := range 3000 {
		P := 1 + rng.IntN(5)
		M := 1 + rng.IntN(2*P)
		pl := ir.Loop(P, 1+rng.IntN(2))
		if rng.IntN(3) == 0 {
			pl = ir.VShape(P)
		}
		p := randomFeasible(rng, pl, M)
		if iter%2 == 1 {
			p = fuseRandom(rng, p)
		}
		for range 1 + rng.IntN(3) {
			mutate(rng, &p, true)
		}
		why := runNaive(p)
		_, err := verify.Check(p, verify.Options{})
		if (err == nil) != (why == "") {
			t.Fatalf("iter %d: verify: %v\nnaive: %q\n%s", iter, err, why, ir.FormatText(p))
		}
		if err == nil {
			accepted++
		} else {
			rejected++
		}
	}
	t.Logf("compute-only mutants: %d accepted, %d rejected", accepted, rejected)
}

// orderOf maps the tests' eager flag to a comm order: eager or late.
func orderOf(eager bool) passes.CommOrder {
	if eager {
		return passes.Eager
	}
	return passes.Late
}
