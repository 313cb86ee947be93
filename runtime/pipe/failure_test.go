package pipe_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// runRanks runs one iteration of every rank and returns each rank's error
// and how long the slowest rank took.
func runRanks(g *rig, fns []func(*pipe.Exec) error) ([]error, time.Duration) {
	errs := make([]error, len(g.xs))
	start := time.Now()
	var wg sync.WaitGroup
	for r, x := range g.xs {
		wg.Go(func() { errs[r] = pipe.Run(x, fns[r]) })
	}
	wg.Wait()
	return errs, time.Since(start)
}

func TestStageErrorAbortsPeers(t *testing.T) {
	for _, tk := range []string{"inproc", "tcp"} {
		t.Run(tk, func(t *testing.T) {
			p := progByName(t, "threeRank1F1B")
			var trs []transport.Transport
			if tk == "inproc" {
				trs = inprocWorld(3, 30*time.Second)
			} else {
				trs = tcpWorld(t, 3, p.spec.Fingerprint, nil)
			}
			g := newRig(t, p, trs, false)
			g.stages[1].failAt = func(kind string, call int) error {
				if call == 2 {
					return errors.New("boom")
				}
				return nil
			}
			errs, took := runRanks(g, rankFns(p, "straight"))
			if took > 10*time.Second {
				t.Errorf("ranks took %v to fail", took)
			}
			var se *pipe.StepError
			if !errors.As(errs[1], &se) || se.Rank != 1 || se.Step != "1F2" || !strings.Contains(errs[1].Error(), "boom") {
				t.Errorf("rank 1: %v", errs[1])
			}
			for _, r := range []int{0, 2} {
				var pe *transport.PeerError
				if !errors.As(errs[r], &pe) || pe.Peer != 1 || !strings.Contains(errs[r].Error(), "rank 1 aborted: pipe: rank 1 step 1F2: boom") {
					t.Errorf("rank %d: %v, want an error naming rank 1 and its failure", r, errs[r])
				}
			}
			// The failure is sticky: the next iteration fails at once.
			if errs, _ := runRanks(g, rankFns(p, "straight")); errs[0] == nil || errs[1] == nil || errs[2] == nil {
				t.Errorf("second iteration after failure: %v", errs)
			}
		})
	}
}

// TestKilledRankTCP kills rank 2's connections in the middle of its forward
// (as if the process died) and leaves its goroutine stuck: the others must
// fail, naming rank 2, within 10 s.
func TestKilledRankTCP(t *testing.T) {
	p := progByName(t, "threeRank1F1B")
	trs := tcpWorld(t, 3, p.spec.Fingerprint, nil)
	g := newRig(t, p, trs, false)
	release := make(chan struct{})
	g.stages[2].failAt = func(kind string, call int) error {
		if call == 1 {
			trs[2].(*transport.TCP).Kill()
			<-release
			return errors.New("dead")
		}
		return nil
	}
	fns := rankFns(p, "straight")
	errs := make([]error, 3)
	var wg sync.WaitGroup
	start := time.Now()
	for _, r := range []int{0, 1} {
		wg.Go(func() { errs[r] = pipe.Run(g.xs[r], fns[r]) })
	}
	dead := make(chan error)
	go func() { dead <- pipe.Run(g.xs[2], fns[2]) }()
	wg.Wait()
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("survivors took %v to fail", took)
	}
	for _, r := range []int{0, 1} {
		var pe *transport.PeerError
		if !errors.As(errs[r], &pe) || pe.Peer != 2 || !errors.Is(errs[r], transport.ErrPeerClosed) ||
			!strings.Contains(errs[r].Error(), "rank 2 closed the connection") {
			t.Errorf("rank %d: %v, want an error naming rank 2", r, errs[r])
		}
	}
	close(release)
	if err := <-dead; err == nil {
		t.Error("killed rank succeeded")
	}
}

// TestHungRankTimesOut: a rank stuck in a stage (heartbeats still flowing)
// is caught by the bounded receive timeout; nobody hangs.
func TestHungRankTimesOut(t *testing.T) {
	p := progByName(t, "threeRank1F1B")
	g := newRig(t, p, inprocWorld(3, 300*time.Millisecond), false)
	release := make(chan struct{})
	g.stages[2].failAt = func(kind string, call int) error {
		if call == 1 {
			<-release
		}
		return nil
	}
	fns := rankFns(p, "straight")
	errs := make([]error, 3)
	var wg sync.WaitGroup
	start := time.Now()
	for _, r := range []int{0, 1} {
		wg.Go(func() { errs[r] = pipe.Run(g.xs[r], fns[r]) })
	}
	stuck := make(chan error)
	go func() { stuck <- pipe.Run(g.xs[2], fns[2]) }()
	wg.Wait()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("survivors took %v to fail", took)
	}
	for _, r := range []int{0, 1} {
		if !errors.Is(errs[r], transport.ErrTimeout) && !errors.Is(errs[r], transport.ErrAborted) {
			t.Errorf("rank %d: %v, want a timeout or an abort", r, errs[r])
		}
	}
	close(release)
	if err := <-stuck; err == nil {
		t.Error("stuck rank succeeded although its peers gave up")
	}
}

// TestHungRankErrorNamesStep: over TCP, a rank stuck in a stage still
// heartbeats, so only the progress timeout (TCPConfig.Timeout, set by
// PPGEN_TIMEOUT) catches it; the error of the rank that waited names it, the
// step it waited in, the peer and the timeout.
func TestHungRankErrorNamesStep(t *testing.T) {
	p := progByName(t, "threeRank1F1B")
	// Rank 0 waits on rank 1 and would time out as soon as rank 1 does
	// (and its abort could reach rank 1 before rank 1's own timer fires), so
	// it gets a longer timeout: rank 1 must be the one whose timer names the
	// stuck rank.
	g := newRig(t, p, tcpWorld(t, 3, p.spec.Fingerprint, func(r int, c *transport.TCPConfig) {
		c.Timeout = 500 * time.Millisecond
		if r == 0 {
			c.Timeout = 3 * time.Second
		}
	}), false)
	release := make(chan struct{})
	g.stages[2].failAt = func(kind string, call int) error {
		if call == 1 {
			<-release
		}
		return nil
	}
	fns := rankFns(p, "straight")
	errs := make([]error, 3)
	var wg sync.WaitGroup
	start := time.Now()
	for _, r := range []int{0, 1} {
		wg.Go(func() { errs[r] = pipe.Run(g.xs[r], fns[r]) })
	}
	stuck := make(chan error)
	go func() { stuck <- pipe.Run(g.xs[2], fns[2]) }()
	wg.Wait()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("survivors took %v to fail", took)
	}
	want := regexp.MustCompile(`^pipe: rank 1: step 1RECV_B\d+ from rank 2: no progress for 500ms \(PPGEN_TIMEOUT\): nothing arrived on grad`)
	if !want.MatchString(fmt.Sprint(errs[1])) || !errors.Is(errs[1], transport.ErrTimeout) {
		t.Errorf("rank 1: %v\nwant it to match %s", errs[1], want)
	}
	// Rank 0 hears of it from rank 1's abort (or times out itself).
	if !errors.Is(errs[0], transport.ErrTimeout) && !errors.Is(errs[0], transport.ErrAborted) {
		t.Errorf("rank 0: %v, want a timeout or an abort", errs[0])
	}
	close(release)
	if err := <-stuck; err == nil {
		t.Error("stuck rank succeeded although its peers gave up")
	}
}

type panicky struct{ affine }

func (p *panicky) Forward(x *tensor.Dense) (*tensor.Dense, any, error) { panic("kaboom") }

func TestPanicInStageFailsRankAndPeers(t *testing.T) {
	p := progByName(t, "twoRank1F1B")
	g := newRig(t, p, inprocWorld(2, 10*time.Second), false)
	// Rebuild rank 1 with a panicking stage.
	g.xs[1].Close()
	x, err := pipe.New(pipe.Config{Rank: 1, Spec: p.spec, Stages: map[int]pipe.Stage{1: &panicky{}}, Loss: mse{}, Data: g.data, Transport: g.trs[1]})
	if err != nil {
		t.Fatal(err)
	}
	g.xs[1] = x
	errs, _ := runRanks(g, rankFns(p, "straight"))
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "panic: kaboom") {
		t.Errorf("rank 1: %v", errs[1])
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1 aborted") {
		t.Errorf("rank 0: %v", errs[0])
	}
}

// TestTagMismatch: two ranks that disagree on the order of transfers get an
// error saying what was received instead of silently mixing micro-batches.
func TestTagMismatch(t *testing.T) {
	p := progByName(t, "twoRank1F1B")
	g := newRig(t, p, inprocWorld(2, 10*time.Second), false)
	rank0 := func(x *pipe.Exec) error {
		x.DataLoad(0, 1, 0)
		x.Forward(0, 1, 0, -1)
		x.SendAct(0, 1, 1, 0)
		return x.Err()
	}
	rank1 := func(x *pipe.Exec) error {
		x.DataLoad(1, 0, 0)
		x.RecvAct(1, 0, 0, 0)
		x.Forward(1, 0, 0, -1)
		return x.Err()
	}
	errs, _ := runRanks(g, []func(*pipe.Exec) error{rank0, rank1})
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "rank 1 step 1RECV_F0 (peer rank 0): received the act of stage 0 micro 1, expected stage 0 micro 0") {
		t.Errorf("rank 1: %v", errs[1])
	}
}

func TestNewValidation(t *testing.T) {
	spec := pipe.Spec{Schedule: "t", Ranks: 2, Stages: 4, Micro: 2, Slots: []int{2, 2}, RankOf: []int{0, 1, 1, 0}, Fingerprint: "fp"}
	st := func() pipe.Stage { return &affine{a: 1} }
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
	p := progByName(t, "twoRank1F1B")
	trs := tcpWorld(t, 2, "sha256:other", nil)
	_, err := pipe.New(pipe.Config{Rank: 1, Spec: p.spec, Stages: map[int]pipe.Stage{1: &affine{}}, Loss: mse{}, Data: &data{}, Transport: trs[1]})
	if err == nil || !strings.Contains(err.Error(), `transport checked schedule fingerprint "sha256:other" with its peers, Spec has "test:twoRank1F1B"`) {
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
		{"forward without data", 0, func(x *pipe.Exec) { x.Forward(0, 0, 0, -1) },
			"pipe: rank 0 step 0F0: no input in slot 0: DataLoad(0, 0) into it has not run"},
		{"foreign stage", 0, func(x *pipe.Exec) { x.DataLoad(2, 0, 0) }, "rank 0 step 2DATA_LOAD0: stage 2 is on rank 2, not on this rank"},
		{"slot range", 1, func(x *pipe.Exec) { x.RecvAct(1, 0, 0, 5) }, "rank 1 step 1RECV_F0 (peer rank 0): slot 5 outside [0, 2)"},
		{"micro range", 1, func(x *pipe.Exec) { x.Forward(1, 7, 0, -1) }, "micro-batch 7 outside [0, 2)"},
		{"wrong peer", 1, func(x *pipe.Exec) { x.RecvAct(1, 0, 2, 0) }, "rank 1 step 1RECV_F0 (peer rank 2): peer rank 2, but stage 0 is on rank 0"},
		{"no neighbour", 0, func(x *pipe.Exec) { x.RecvAct(0, 0, 1, 0) }, "stage 0 has no neighbour stage -1"},
		{"slot mismatch", 0, func(x *pipe.Exec) { x.DataLoad(0, 0, 0); x.Forward(0, 0, 1, -1) }, "rank 0 step 0F0: no input in slot 1"},
		{"backward before forward", 1, func(x *pipe.Exec) { x.RecvAct(1, 0, 0, 0); x.Backward(1, 0, 0, -1) },
			"rank 1 step 1B0: chunk in slot 0 is not between its F and its backward"},
		{"recv grad for absent chunk", 1, func(x *pipe.Exec) { x.RecvGrad(1, 1, 2, 1) }, "rank 1 step 1RECV_B1 (peer rank 2): slot 1 holds no chunk"},
		{"weight before input", 0, func(x *pipe.Exec) { x.DataLoad(0, 0, 0); x.Forward(0, 0, 0, -1); x.BackwardWeight(0, 0, 0) },
			"rank 0 step 0W0: chunk in slot 0 is not between its I and its W"},
		{"bad src", 1, func(x *pipe.Exec) { x.Forward(1, 0, 0, 1) }, "rank 1 step 1F0: source slot 1 holds no output of F(0, 0)"},
		{"send before forward", 0, func(x *pipe.Exec) { x.DataLoad(0, 0, 0); x.SendAct(0, 0, 1, 0) }, "no output in slot 0: F(0, 0) has not run"},
		// Arguments no At can hold take the unpacked methods' own check,
		// with the slow paths' messages.
		{"huge micro", 1, func(x *pipe.Exec) { x.Forward(1, 1<<20, 0, -1) }, "rank 1 step 1F1048576: micro-batch 1048576 outside [0, 2)"},
		{"negative stage", 0, func(x *pipe.Exec) { x.DataLoad(-7, 0, 0) }, "stage -7 outside [0, 3)"},
		{"huge slot", 1, func(x *pipe.Exec) { x.RecvGrad(1, 0, 2, 70000) }, "slot 70000 outside [0, 2)"},
		{"huge peer", 1, func(x *pipe.Exec) { x.SendGrad(1, 0, 70000, 0) }, "peer rank 70000, but stage 0 is on rank 0"},
		{"huge src", 1, func(x *pipe.Exec) { x.BackwardInput(1, 0, 0, 1<<40) }, "source slot 1099511627776 invalid (slot 0, 2 slots)"},
		{"src below -1", 1, func(x *pipe.Exec) { x.Backward(1, 0, 0, -2) }, "source slot -2 invalid"},
		{"packed micro range", 1, func(x *pipe.Exec) { x.F(0x0001_0009_0000_ffff) }, "rank 1 step 1F9: micro-batch 9 outside [0, 2)"},
		{"packed -1 stage", 1, func(x *pipe.Exec) { x.W(0xffff_0000_0000_ffff) }, "stage -1 outside [0, 3)"},
		// A fused call stops at its first failing half.
		{"fused recv on stage 0", 0, func(x *pipe.Exec) { x.RecvAndF(0x0000_0000_0000_ffff) }, "rank 0 step 0RECV_F0: stage 0 has no neighbour stage -1"},
		{"fused forward fails first", 0, func(x *pipe.Exec) { x.FAndSend(0x0000_0000_0000_ffff) }, "rank 0 step 0F0: no input in slot 0"},
		{"fused send to a missing stage", 2, func(x *pipe.Exec) { x.RecvAndB(0x0002_0000_0000_ffff) }, "rank 2 step 2RECV_B0: stage 2 has no neighbour stage 3"},
		{"slot reuse with pending recv", 1, func(x *pipe.Exec) { x.RecvAct(1, 0, 0, 0); x.RecvAct(1, 1, 0, 0) },
			"rank 1 step 1RECV_F1 (peer rank 0): slot 0 still has a pending receive for chunk (stage 1, micro 0)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			trs := transport.NewInProc(3, transport.InProcTimeout(time.Second))
			stages := map[int]pipe.Stage{tc.rank: &affine{a: 1}}
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
			x.DataLoad(0, 1, 1) // no-op after an error
			x.OptStep()
			if x.Err() != err || counting.n != loads {
				t.Fatalf("error not sticky: %v, loads %d -> %d", x.Err(), loads, counting.n)
			}
			// The peers learn about it.
			peer := (tc.rank + 1) % 3
			if _, _, perr := trs[peer].Recv(tc.rank, transport.Act); !errors.Is(perr, transport.ErrAborted) {
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
	p := progByName(t, "twoRank1F1B")
	g := newRig(t, p, inprocWorld(2, time.Second), false)
	g.xs[0].Close()
	g.xs[0].DataLoad(0, 0, 0)
	g.xs[0].Forward(0, 0, 0, -1)
	g.xs[0].SendAct(0, 0, 1, 0)
	if err := g.xs[0].Err(); !errors.Is(err, pipe.ErrClosed) {
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

func newNoopExec(t testing.TB) *pipe.Exec {
	t.Helper()
	spec := oneRankLocalSpec
	stages := map[int]pipe.Stage{}
	for s := range spec.Stages {
		stages[s] = noop{}
	}
	x, err := pipe.New(pipe.Config{Rank: 0, Spec: spec, Stages: stages, Loss: noop{}, Data: noop{}, OptStep: noop{}.OptStep})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestStepsDoNotAllocate: the runtime allocates nothing per step beyond what
// the stages do (here: nothing), in straight-line code and the interpreter.
func TestStepsDoNotAllocate(t *testing.T) {
	x := newNoopExec(t)
	defer x.Close()
	ops := progByName(t, "oneRankLocal").ops[0]
	for name, fn := range map[string]func(){
		"straight":  func() { x.Reset(); oneRankLocalRank0(x) },
		"interpret": func() { x.Reset(); pipe.Interpret(x, ops) },
	} {
		if a := testing.AllocsPerRun(20, fn); a != 0 {
			t.Errorf("%s: %v allocations per iteration of %d steps", name, a, len(ops))
		}
		if err := x.Err(); err != nil {
			t.Fatal(err)
		}
	}
}
