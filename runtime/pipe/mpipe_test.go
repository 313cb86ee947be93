package pipe_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// ownedSpec: two ranks, two stages, both micro-batches owned (rank m owns m).
var ownedSpec = pipe.Spec{Schedule: "mpipe", Ranks: 2, Stages: 2, Micro: 2, Slots: []int{2, 2}, RankOf: []int{0, 1}, Fingerprint: "test:owned", Owned: 2}

func ownedExecs(t *testing.T) [2]*pipe.Exec {
	t.Helper()
	trs := inprocWorld(2, 5*time.Second)
	var xs [2]*pipe.Exec
	for r := range 2 {
		x, err := pipe.New(pipe.Config{Rank: r, Spec: ownedSpec, Stages: map[int]pipe.Stage{r: noop{}}, Loss: noop{}, Data: noop{}, Transport: trs[r]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		xs[r] = x
	}
	return xs
}

// TestOwnedInputTransfer: rank 1 loads micro 1 and ships it; rank 0's F of
// (0, 1) takes the received tensor as its input.
func TestOwnedInputTransfer(t *testing.T) {
	xs := ownedExecs(t)
	run(xs[1], load(0, 1, -1))
	run(xs[1], mpipeSend(0, 1, 0, -1))
	run(xs[0], mpipeRecv(0, 1, 1, 0))
	run(xs[0], fwd(0, 1, 0, -1))
	run(xs[0], sendAct(0, 1, 1, 0))
	for r, x := range xs {
		if err := x.Sync(); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func TestOwnedInputErrors(t *testing.T) {
	tests := []struct {
		name string
		rank int
		run  func(x *pipe.Exec)
		want string
	}{
		{"send before load", 1, func(x *pipe.Exec) { run(x, mpipeSend(0, 1, 0, -1)) }, "rank 1 step 0MPIPE_FWD_SEND1 (peer rank 0): the input of micro 1 is not loaded: 0DATA_LOAD1 must come first on this rank"},
		{"load of a micro another rank owns", 1, func(x *pipe.Exec) { run(x, load(0, 0, -1)) }, "stage 0 is on rank 0, not on this rank"},
		{"two loads without a send", 1, func(x *pipe.Exec) { run(x, load(0, 1, -1)); run(x, load(0, 1, -1)) }, "the input of micro 1 is loaded and not yet sent"},
		{"send to the wrong rank", 1, func(x *pipe.Exec) { run(x, load(0, 1, -1)); run(x, mpipeSend(0, 1, 1, -1)) }, "peer rank 1, but stage 0 is on rank 0"},
		{"receive from a rank that does not own the micro", 0, func(x *pipe.Exec) { run(x, mpipeRecv(0, 1, 0, 0)) }, "peer rank 0, but micro 1 is owned by rank 1"},
		{"receive of the rank's own micro", 0, func(x *pipe.Exec) { run(x, mpipeRecv(0, 0, 1, 0)) }, "this rank owns micro 0: it loads it with DATA_LOAD"},
		{"forward with no input posted", 0, func(x *pipe.Exec) { run(x, fwd(0, 1, 0, -1)) }, "no input in slot 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			xs := ownedExecs(t)
			tc.run(xs[tc.rank])
			if err := xs[tc.rank].Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestOwnedSpecChecks(t *testing.T) {
	bad := ownedSpec
	bad.Owned = 3
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "Owned = 3") {
		t.Errorf("Validate = %v, want the Owned range error", err)
	}
	// Rank 1 holds a middle stage, so only owning micro 1 needs its Data.
	three := pipe.Spec{Schedule: "mpipe", Ranks: 3, Stages: 3, Micro: 3, Slots: []int{3, 1, 1}, RankOf: []int{0, 1, 2}, Fingerprint: "test:owned3", Owned: 3}
	trs := inprocWorld(3, time.Second)
	_, err := pipe.New(pipe.Config{Rank: 1, Spec: three, Stages: map[int]pipe.Stage{1: noop{}}, Transport: trs[1]})
	if err == nil || !strings.Contains(err.Error(), "rank 1 owns micro-batch 1") {
		t.Errorf("New without Data on an owner = %v", err)
	}
}

func TestSpecInputs(t *testing.T) {
	full := pipe.Spec{Ranks: 3, Stages: 3, Micro: 7, RankOf: []int{0, 1, 2}, Owned: 7}
	min := full
	min.Owned = 3
	plain := full
	plain.Owned = 0
	copies := pipe.Spec{Ranks: 2, Stages: 4, Micro: 4, RankOf: []int{0, 1, 1, 0}, Copies: 2}
	for _, tc := range []struct {
		name string
		sp   pipe.Spec
		want [][]int
	}{
		{"full", full, [][]int{{0, 3, 6}, {1, 4}, {2, 5}}},
		{"min", min, [][]int{{0, 3, 4, 5, 6}, {1}, {2}}},
		{"no owners", plain, [][]int{{0, 1, 2, 3, 4, 5, 6}, nil, nil}},
		{"two copies", copies, [][]int{{0, 1}, {2, 3}}},
	} {
		for r, want := range tc.want {
			if got := tc.sp.Inputs(r); !slices.Equal(got, want) {
				t.Errorf("%s: Inputs(%d) = %v, want %v", tc.name, r, got, want)
			}
		}
	}
}
