package pipe_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// labelsSpec: two ranks, two stages, labels shipped from rank 0 to rank 1.
var labelsSpec = pipe.Spec{Schedule: "1f1b", Ranks: 2, Stages: 2, Micro: 1, Slots: []int{1, 1}, RankOf: []int{0, 1}, Fingerprint: "test:labels", ShipLabels: true}

func labelsExecs(t *testing.T, sp pipe.Spec, lastData pipe.DataSource) [2]*pipe.Exec {
	t.Helper()
	trs := inprocWorld(2, 5*time.Second)
	var xs [2]*pipe.Exec
	for r := range 2 {
		cfg := pipe.Config{Rank: r, Spec: sp, Stages: map[int]pipe.Stage{r: noop{}}, Loss: noop{}, Data: noop{}, Transport: trs[r]}
		if r == 1 {
			cfg.Data = lastData
		}
		x, err := pipe.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		xs[r] = x
	}
	return xs
}

// TestShippedLabels: rank 1, the last stage's, has no data source; its F
// computes the loss with the labels rank 0 loaded and shipped ahead of the
// activation.
func TestShippedLabels(t *testing.T) {
	xs := labelsExecs(t, labelsSpec, nil)
	run(xs[0], load(0, 0, 0))
	run(xs[0], fwd(0, 0, 0, -1))
	run(xs[0], sendData(0, 0, 1, 0))
	run(xs[0], sendAct(0, 0, 1, 0))
	run(xs[1], recvData(1, 0, 0, 0))
	run(xs[1], recvAct(1, 0, 0, 0))
	run(xs[1], fwd(1, 0, 0, -1))
	for r, x := range xs {
		if err := x.Sync(); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if l := xs[1].Losses()[0]; math.IsNaN(l) {
		t.Errorf("rank 1 computed no loss")
	}
}

func TestShippedLabelsErrors(t *testing.T) {
	loaded := labelsSpec
	loaded.ShipLabels = false
	tests := []struct {
		name string
		sp   pipe.Spec
		rank int
		run  func(x *pipe.Exec)
		want string
	}{
		{"send of labels a load did not bring", loaded, 0, func(x *pipe.Exec) { run(x, load(0, 0, 0)); run(x, sendData(0, 0, 1, 0)) },
			"rank 0 step 0DATA_SEND0 (peer rank 1): no labels in slot 0: 0DATA_LOAD0 (with Spec.ShipLabels, on the first stage) or 0DATA_RECV0 must come first"},
		{"receive from the wrong rank", labelsSpec, 1, func(x *pipe.Exec) { run(x, recvData(1, 0, 1, 0)) }, "peer rank 1, but stage 0 is on rank 0"},
		{"send past the last stage", labelsSpec, 1, func(x *pipe.Exec) { run(x, sendData(1, 0, 0, 0)) }, "stage 1 has no neighbour stage 2"},
		{"loss without the labels", labelsSpec, 1, func(x *pipe.Exec) { run(x, recvAct(1, 0, 0, 0)); run(x, fwd(1, 0, 0, -1)) }, "rank 1 step 1F0: no labels in slot 0: 1DATA_RECV0 into it was not posted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			xs := labelsExecs(t, tc.sp, noop{})
			if tc.name == "loss without the labels" {
				// Rank 0 sends the activation only.
				run(xs[0], load(0, 0, 0))
				run(xs[0], fwd(0, 0, 0, -1))
				run(xs[0], sendAct(0, 0, 1, 0))
			}
			tc.run(xs[tc.rank])
			if err := xs[tc.rank].Sync(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// Without shipped labels the last stage's rank must have a data source.
	trs := inprocWorld(2, time.Second)
	if _, err := pipe.New(pipe.Config{Rank: 1, Spec: loaded, Stages: map[int]pipe.Stage{1: noop{}}, Loss: noop{}, Transport: trs[1]}); err == nil || !strings.Contains(err.Error(), "Config.Data is nil") {
		t.Errorf("New without Data on the last stage's rank = %v", err)
	}
}
