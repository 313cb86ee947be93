package passes

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

func TestLower(t *testing.T) {
	p := oneF1B(4, 8)
	q, info, err := Lower(p, Options{Comm: CommOptions{Order: Late}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(info.Passes, ","); got != "data+comm,opt,slots" {
		t.Errorf("passes %q", got)
	}
	if !equalInts(info.Slots, []int{4, 3, 2, 1}) {
		t.Errorf("slots %v, want [4 3 2 1] (1F1B: P-r chunks in flight)", info.Slots)
	}
	if info.RecvDistance != 0 || len(info.RecvDistances) != 4 {
		t.Errorf("recv distance %v %v", info.RecvDistance, info.RecvDistances)
	}
	var loads, comm, unslotted int
	for _, steps := range q.Ranks {
		for _, st := range steps {
			switch {
			case st.Kind == ir.DataLoad:
				loads++
			case st.Kind.IsComm():
				comm++
			}
			if st.Stage >= 0 && st.Micro >= 0 && st.Slot < 0 {
				unslotted++
			}
		}
	}
	if loads != 16 || comm != 2*2*3*8 || unslotted != 0 {
		t.Errorf("loads %d (want 16), transfers %d (want 96), steps without slot %d", loads, comm, unslotted)
	}

	// NoData skips the data pass.
	_, info, err = Lower(p, Options{NoData: true})
	if err != nil || strings.Join(info.Passes, ",") != "comm,opt,slots" {
		t.Errorf("NoData: passes %v, err %v", info.Passes, err)
	}

	// Errors name the pass and keep their type.
	_, _, err = Lower(mustParse("rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1B1 1F0 1B0"), Options{})
	var ce *CycleError
	if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "lowering (pass data+comm): comm: compute order is infeasible, ranks wait for one another: rank 0 at step 2 (0B0)") {
		t.Errorf("err = %v", err)
	}
}

// TestLowerFusedEqualsPasses: Lower's fused data+comm pass gives exactly
// AssignSlots(InsertOptStep(InsertComm(InsertData(p)))), errors included,
// in every comm order.
func TestLowerFusedEqualsPasses(t *testing.T) {
	check := func(name string, p ir.Program) {
		t.Helper()
		for _, order := range []CommOrder{Timed, Late, Eager} {
			got, _, gerr := Lower(p, Options{Comm: CommOptions{Order: order}})
			want, werr := InsertComm(InsertData(p), CommOptions{Order: order})
			if werr == nil {
				want, _, werr = AssignSlots(InsertOptStep(want))
			}
			if (gerr == nil) != (werr == nil) || (gerr != nil && !strings.HasSuffix(gerr.Error(), werr.Error())) {
				t.Fatalf("%s %v: Lower error %v, passes error %v", name, order, gerr, werr)
			}
			if gerr == nil && withSlots(got) != withSlots(want) {
				t.Fatalf("%s %v: Lower\n%s\npasses\n%s", name, order, withSlots(got), withSlots(want))
			}
		}
	}
	for P := 1; P <= 5; P++ {
		for M := 1; M <= 2*P; M++ {
			for name, p := range families(P, M) {
				check(name, p)
			}
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 300 {
		P := 1 + rng.IntN(4)
		pl := ir.Loop(P, 1+rng.IntN(2))
		if iter%3 == 0 {
			pl = ir.VShape(P)
		}
		p := randomOrder(rng, pl, 1+rng.IntN(2*P), rng.IntN(2) == 0)
		if iter%2 == 0 {
			p = fuseRandom(rng, p)
		}
		check("random", p)
		// An OPT_STEP already in the compute order of some ranks (at a
		// random place): "opt" must add none there, as InsertOptStep does.
		if iter%4 == 1 {
			q := p
			q.Ranks = slices.Clone(p.Ranks)
			for r := range q.Ranks {
				if rng.IntN(2) == 0 {
					at := rng.IntN(len(q.Ranks[r]) + 1)
					q.Ranks[r] = slices.Insert(slices.Clone(q.Ranks[r]), at, ir.Step{Kind: ir.OptStep, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None})
				}
			}
			check("random with OPT_STEP", q)
		}
	}
}
