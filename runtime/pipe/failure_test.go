package pipe_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// twoRankSpec is a two-rank, two-stage pipeline of four micro-batches.
var twoRankSpec = pipe.Spec{Schedule: "t", Ranks: 2, Stages: 2, Micro: 4, Slots: []int{2, 2}, RankOf: []int{0, 1}, Fingerprint: "test:twoRanks"}

// twoRanks returns the two Execs of twoRankSpec on affine stages over an
// in-process world whose receives time out after timeout.
func twoRanks(t *testing.T, timeout time.Duration) [2]*pipe.Exec {
	t.Helper()
	trs := inprocWorld(2, timeout)
	var xs [2]*pipe.Exec
	for r := range xs {
		x, err := pipe.New(pipe.Config{Rank: r, Spec: twoRankSpec, Stages: map[int]pipe.Stage{r: &affine{A: 1}}, Loss: mse{}, Data: &data{}, Transport: trs[r]})
		if err != nil {
			t.Fatal(err)
		}
		xs[r] = x
	}
	t.Cleanup(func() {
		for r, x := range xs {
			x.Close()
			trs[r].Close()
		}
	})
	return xs
}

// TestTagMismatch: two ranks that disagree on the order of transfers get an
// error saying what was received instead of silently mixing micro-batches.
func TestTagMismatch(t *testing.T) {
	xs := twoRanks(t, 10*time.Second)
	rank0 := func(x *pipe.Exec) error {
		run(x, load(0, 1, 0))
		run(x, fwd(0, 1, 0, -1))
		run(x, sendAct(0, 1, 1, 0))
		return x.Err()
	}
	rank1 := func(x *pipe.Exec) error {
		run(x, load(1, 0, 0))
		run(x, recvAct(1, 0, 0, 0))
		run(x, fwd(1, 0, 0, -1))
		return x.Err()
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, fn := range []func(*pipe.Exec) error{rank0, rank1} {
		wg.Go(func() { errs[r] = pipe.Run(xs[r], fn) })
	}
	wg.Wait()
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "rank 1 step 1RECV_F0 (peer rank 0): received the act of stage 0 micro 1, expected stage 0 micro 0") {
		t.Errorf("rank 1: %v", errs[1])
	}
}

func TestNewValidation(t *testing.T) {
	spec := pipe.Spec{Schedule: "t", Ranks: 2, Stages: 4, Micro: 2, Slots: []int{2, 2}, RankOf: []int{0, 1, 1, 0}, Fingerprint: "fp"}
	st := func() pipe.Stage { return &affine{A: 1} }
	trs := transport.NewInProc(2)
	cases := []struct {
		name string
		cfg  pipe.Config
		want string
	}{
		{"bad spec", pipe.Config{Spec: pipe.Spec{Ranks: 1, Stages: 2, Micro: 1, Slots: []int{1}, RankOf: []int{0}}}, "len(RankOf) = 1, want Stages = 2"},
		{"rank range", pipe.Config{Rank: 2, Spec: spec}, "rank 2 outside [0, 2)"},
		{"missing stage", pipe.Config{Rank: 0, Spec: spec, Stages: map[int]pipe.Stage{0: st()}, Loss: mse{}, Data: &data{}, Transport: trs[0]},
			"holds stages [0 3] per Spec.RankOf, but Config.Stages lacks stage 3"},
		{"foreign stage", pipe.Config{Rank: 0, Spec: spec, Stages: map[int]pipe.Stage{0: st(), 1: st(), 3: st()}, Loss: mse{}, Data: &data{}, Transport: trs[0]},
			"Config.Stages has stage 1, which Spec.RankOf places on rank 1"},
		{"no loss", pipe.Config{Rank: 0, Spec: spec, Stages: map[int]pipe.Stage{0: st(), 3: st()}, Data: &data{}, Transport: trs[0]},
			"holds the last stage (3) but Config.Loss is nil"},
		{"no data", pipe.Config{Rank: 0, Spec: spec, Stages: map[int]pipe.Stage{0: st(), 3: st()}, Loss: mse{}, Transport: trs[0]},
			"Config.Data is nil"},
		{"no transport", pipe.Config{Rank: 1, Spec: spec, Stages: map[int]pipe.Stage{1: st(), 2: st()}},
			"Config.Transport is nil but Spec has 2 ranks"},
		{"wrong transport rank", pipe.Config{Rank: 1, Spec: spec, Stages: map[int]pipe.Stage{1: st(), 2: st()}, Transport: trs[0]},
			"transport is rank 0 of 2"},
	}
	for _, tc := range cases {
		_, err := pipe.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestNewRefusesSpecsBeyondAt(t *testing.T) {
	for _, sp := range []pipe.Spec{
		{Schedule: "t", Ranks: 1, Stages: 1, Micro: 70000, Slots: []int{1}, RankOf: []int{0}, Fingerprint: "fp"},
		{Schedule: "t", Ranks: 1, Stages: 1, Micro: 1, Slots: []int{65536}, RankOf: []int{0}, Fingerprint: "fp"},
	} {
		_, err := pipe.New(pipe.Config{Spec: sp, Stages: map[int]pipe.Stage{0: &affine{}}, Loss: mse{}, Data: &data{}})
		if err == nil || !strings.Contains(err.Error(), "at most 65535 of each") {
			t.Errorf("Micro %d, Slots %v: err = %v", sp.Micro, sp.Slots, err)
		}
	}
}

func TestNewChecksTransportFingerprint(t *testing.T) {
	trs := tcpWorld(t, 2, "sha256:other", nil)
	_, err := pipe.New(pipe.Config{Rank: 1, Spec: twoRankSpec, Stages: map[int]pipe.Stage{1: &affine{}}, Loss: mse{}, Data: &data{}, Transport: trs[1]})
	if err == nil || !strings.Contains(err.Error(), `transport checked schedule fingerprint "sha256:other" with its peers, Spec has "test:twoRanks"`) {
		t.Fatalf("err = %v", err)
	}
}

// TestStepMisuse drives an Exec with wrong calls: each error names rank and
// step, is sticky, and later calls do nothing.
func TestStepMisuse(t *testing.T) {
	spec := pipe.Spec{Schedule: "t", Ranks: 3, Stages: 3, Micro: 2, Slots: []int{2, 2, 2}, RankOf: []int{0, 1, 2}, Fingerprint: "fp"}
	cases := []struct {
		name string
		rank int
		fn   func(x *pipe.Exec)
		want string
	}{
		{"forward without data", 0, func(x *pipe.Exec) { run(x, fwd(0, 0, 0, -1)) },
			"pipe: rank 0 step 0F0: no input in slot 0: 0DATA_LOAD0 into it has not run"},
		{"forward without recv", 1, func(x *pipe.Exec) { run(x, fwd(1, 1, 0, -1)) }, "rank 1 step 1F1: no input in slot 0: 1RECV_F1 into it was not posted"},
		{"backward without recv", 0, func(x *pipe.Exec) { run(x, load(0, 1, 1)); run(x, fwd(0, 1, 1, -1)); run(x, bwd(0, 1, 1, -1)) },
			"rank 0 step 0B1: no output gradient in slot 1: 0RECV_B1 into it was not posted"},
		{"bad backward src", 0, func(x *pipe.Exec) { run(x, load(0, 0, 0)); run(x, fwd(0, 0, 0, -1)); run(x, bwdInput(0, 0, 0, 1)) },
			"rank 0 step 0I0: source slot 1 holds no input gradient of 1B0 or 1I0"},
		{"foreign stage", 0, func(x *pipe.Exec) { run(x, load(2, 0, 0)) }, "rank 0 step 2DATA_LOAD0: stage 2 is on rank 2, not on this rank"},
		{"slot range", 1, func(x *pipe.Exec) { run(x, recvAct(1, 0, 0, 5)) }, "rank 1 step 1RECV_F0 (peer rank 0): slot 5 outside [0, 2)"},
		{"micro range", 1, func(x *pipe.Exec) { run(x, fwd(1, 7, 0, -1)) }, "micro-batch 7 outside [0, 2)"},
		{"wrong peer", 1, func(x *pipe.Exec) { run(x, recvAct(1, 0, 2, 0)) }, "rank 1 step 1RECV_F0 (peer rank 2): peer rank 2, but stage 0 is on rank 0"},
		{"no neighbour", 0, func(x *pipe.Exec) { run(x, recvAct(0, 0, 1, 0)) }, "stage 0 has no neighbour stage -1"},
		{"slot mismatch", 0, func(x *pipe.Exec) { run(x, load(0, 0, 0)); run(x, fwd(0, 0, 1, -1)) }, "rank 0 step 0F0: no input in slot 1"},
		{"backward before forward", 1, func(x *pipe.Exec) { run(x, recvAct(1, 0, 0, 0)); run(x, bwd(1, 0, 0, -1)) },
			"rank 1 step 1B0: chunk in slot 0 is not between its F and its backward"},
		{"recv grad for absent chunk", 1, func(x *pipe.Exec) { run(x, recvGrad(1, 1, 2, 1)) }, "rank 1 step 1RECV_B1 (peer rank 2): slot 1 holds no chunk"},
		{"weight before input", 0, func(x *pipe.Exec) { run(x, load(0, 0, 0)); run(x, fwd(0, 0, 0, -1)); run(x, bwdWeight(0, 0, 0)) },
			"rank 0 step 0W0: chunk in slot 0 is not between its I and its W"},
		{"bad src", 1, func(x *pipe.Exec) { run(x, fwd(1, 0, 0, 1)) }, "rank 1 step 1F0: source slot 1 holds no output of 0F0"},
		{"send before forward", 0, func(x *pipe.Exec) { run(x, load(0, 0, 0)); run(x, sendAct(0, 0, 1, 0)) }, "rank 0 step 0SEND_F0 (peer rank 1): no output in slot 0: 0F0 has not run"},
		// Arguments no At can hold (Interpret takes them as ints) get the
		// slow paths' messages.
		{"huge micro", 1, func(x *pipe.Exec) { run(x, fwd(1, 1<<20, 0, -1)) }, "rank 1 step 1F1048576: micro-batch 1048576 outside [0, 2)"},
		{"negative stage", 0, func(x *pipe.Exec) { run(x, load(-7, 0, 0)) }, "stage -7 outside [0, 3)"},
		{"huge slot", 1, func(x *pipe.Exec) { run(x, recvGrad(1, 0, 2, 70000)) }, "slot 70000 outside [0, 2)"},
		{"huge peer", 1, func(x *pipe.Exec) { run(x, sendGrad(1, 0, 70000, 0)) }, "peer rank 70000, but stage 0 is on rank 0"},
		{"huge src", 1, func(x *pipe.Exec) { run(x, bwdInput(1, 0, 0, 1<<30)) }, "source slot 1073741824 invalid (slot 0, 2 slots)"},
		{"src below -1", 1, func(x *pipe.Exec) { run(x, bwd(1, 0, 0, -2)) }, "source slot -2 invalid"},
		{"packed micro range", 1, func(x *pipe.Exec) { x.F(0x0001_0009_0000_ffff) }, "rank 1 step 1F9: micro-batch 9 outside [0, 2)"},
		{"packed -1 stage", 1, func(x *pipe.Exec) { x.W(0xffff_0000_0000_ffff) }, "stage -1 outside [0, 3)"},
		// A fused call stops at its first failing half.
		{"fused recv on stage 0", 0, func(x *pipe.Exec) { x.RecvAndF(0x0000_0000_0000_ffff) }, "rank 0 step 0RECV_F0: stage 0 has no neighbour stage -1"},
		{"fused forward fails first", 0, func(x *pipe.Exec) { x.FAndSend(0x0000_0000_0000_ffff) }, "rank 0 step 0F0: no input in slot 0"},
		{"fused send to a missing stage", 2, func(x *pipe.Exec) { x.RecvAndB(0x0002_0000_0000_ffff) }, "rank 2 step 2RECV_B0: stage 2 has no neighbour stage 3"},
		{"slot reuse with pending recv", 1, func(x *pipe.Exec) { run(x, recvAct(1, 0, 0, 0)); run(x, recvAct(1, 1, 0, 0)) },
			"rank 1 step 1RECV_F1 (peer rank 0): slot 0 still has a pending receive for chunk (stage 1, micro 0)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			trs := transport.NewInProc(3, transport.InProcTimeout(time.Second))
			stages := map[int]pipe.Stage{tc.rank: &affine{A: 1}}
			counting := &countingData{}
			x, err := pipe.New(pipe.Config{Rank: tc.rank, Spec: spec, Stages: stages, Loss: mse{}, Data: counting, Transport: trs[tc.rank]})
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			tc.fn(x)
			err = x.Err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant %q", err, tc.want)
			}
			var se *pipe.StepError
			if !errors.As(err, &se) || se.Rank != tc.rank {
				t.Fatalf("not a StepError of rank %d: %#v", tc.rank, err)
			}
			loads := counting.n
			run(x, load(0, 1, 1)) // no-op after an error
			x.OptStep()
			if x.Err() != err || counting.n != loads {
				t.Fatalf("error not sticky: %v, loads %d -> %d", x.Err(), loads, counting.n)
			}
			// The peers learn about it.
			peer := (tc.rank + 1) % 3
			if _, _, perr := trs[peer].Recv(tc.rank, abi.ActChannel); !errors.Is(perr, transport.ErrAborted) {
				t.Fatalf("peer %d after the failure: %v", peer, perr)
			}
		})
	}
}

type countingData struct{ n int }

func (c *countingData) Input(m int) (*tensor.Dense, error) {
	c.n++
	return (&data{}).Input(m)
}

func (c *countingData) Target(m int) (*tensor.Dense, error) {
	c.n++
	return (&data{}).Target(m)
}

func TestStepsAfterCloseFail(t *testing.T) {
	x := twoRanks(t, time.Second)[0]
	x.Close()
	run(x, load(0, 0, 0), fwd(0, 0, 0, -1), sendAct(0, 0, 1, 0))
	if err := x.Err(); !errors.Is(err, pipe.ErrClosed) {
		t.Fatalf("err = %v", err)
	}
}

// noop is a Stage and Loss that allocate nothing: for measuring the
// runtime's own per-step cost.
type noop struct{}

func (noop) Forward(x *tensor.Dense) (*tensor.Dense, any, error)          { return x, nil, nil }
func (noop) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) { return dy, nil }
func (noop) BackwardWeight(any, *tensor.Dense) error                      { return nil }
func (noop) Loss(y, _ *tensor.Dense) (float64, *tensor.Dense, error)      { return 0, y, nil }
func (noop) Input(int) (*tensor.Dense, error)                             { return noopTensor, nil }
func (noop) Target(int) (*tensor.Dense, error)                            { return noopTensor, nil }
func (noop) OptStep() error                                               { return nil }

var noopTensor = tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{1}))
