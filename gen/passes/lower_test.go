package passes

import (
	"errors"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

func TestLower(t *testing.T) {
	p := oneF1B(4, 8)
	q, info, err := Lower(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(info.Passes, ","); got != "data,comm,slots" {
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
	if err != nil || strings.Join(info.Passes, ",") != "comm,slots" {
		t.Errorf("NoData: passes %v, err %v", info.Passes, err)
	}

	// Errors name the pass and keep their type.
	_, _, err = Lower(mustParse("rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1B1 1F0 1B0"), Options{})
	var ce *CycleError
	if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "lowering (pass comm): comm: compute order is infeasible") {
		t.Errorf("err = %v", err)
	}
}
