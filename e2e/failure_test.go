package e2e_test

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/e2e/onerank"
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
			p := progByName(t, "onef1b")
			var trs []transport.Transport
			if tk == "inproc" {
				trs = inprocWorld(p.spec.Ranks, 30*time.Second)
			} else {
				trs = tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil)
			}
			g := newRig(t, p, trs, false)
			g.stages[1].FailAt = func(kind string, call int) error {
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
			for _, r := range []int{0, 2, 3} {
				var pe *transport.PeerError
				if !errors.As(errs[r], &pe) || pe.Peer != 1 || !strings.Contains(errs[r].Error(), "rank 1 aborted: pipe: rank 1 step 1F2: boom") {
					t.Errorf("rank %d: %v, want an error naming rank 1 and its failure", r, errs[r])
				}
			}
			// The failure is sticky: the next iteration fails at once.
			if errs, _ := runRanks(g, rankFns(p, "straight")); slices.Contains(errs, nil) {
				t.Errorf("second iteration after failure: %v", errs)
			}
		})
	}
}

// TestKilledRankTCP kills rank 2's connections in the middle of its forward
// (as if the process died) and leaves its goroutine stuck: the others must
// fail, naming rank 2, within 10 s.
func TestKilledRankTCP(t *testing.T) {
	p := progByName(t, "onef1b")
	trs := tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil)
	g := newRig(t, p, trs, false)
	release := make(chan struct{})
	g.stages[2].FailAt = func(kind string, call int) error {
		if call == 1 {
			trs[2].(*transport.TCP).Kill()
			<-release
			return errors.New("dead")
		}
		return nil
	}
	fns := rankFns(p, "straight")
	errs := make([]error, p.spec.Ranks)
	var wg sync.WaitGroup
	start := time.Now()
	for _, r := range []int{0, 1, 3} {
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
	p := progByName(t, "onef1b")
	g := newRig(t, p, inprocWorld(p.spec.Ranks, 300*time.Millisecond), false)
	release := make(chan struct{})
	g.stages[2].FailAt = func(kind string, call int) error {
		if call == 1 {
			<-release
		}
		return nil
	}
	fns := rankFns(p, "straight")
	errs := make([]error, p.spec.Ranks)
	var wg sync.WaitGroup
	start := time.Now()
	for _, r := range []int{0, 1, 3} {
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
	p := progByName(t, "onef1b")
	// Only rank 1 has the short timeout: every other rank would time out as
	// soon as it does (and its abort could reach rank 1 before rank 1's own
	// timer fires), so rank 1's timer must be the one that names the stuck
	// rank. The others' 30 s leaves room for a loaded machine to start the
	// ranks far apart; they hear of the failure from rank 1's abort.
	g := newRig(t, p, tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, func(r int, c *transport.TCPConfig) {
		c.Timeout = 30 * time.Second
		if r == 1 {
			c.Timeout = 500 * time.Millisecond
		}
	}), false)
	release := make(chan struct{})
	g.stages[2].FailAt = func(kind string, call int) error {
		if call == 1 {
			<-release
		}
		return nil
	}
	fns := rankFns(p, "straight")
	errs := make([]error, p.spec.Ranks)
	var wg sync.WaitGroup
	start := time.Now()
	for _, r := range []int{0, 1, 3} {
		wg.Go(func() { errs[r] = pipe.Run(g.xs[r], fns[r]) })
	}
	stuck := make(chan error)
	go func() { stuck <- pipe.Run(g.xs[2], fns[2]) }()
	wg.Wait()
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("survivors took %v to fail", took)
	}
	want := regexp.MustCompile(`^pipe: rank 1: step 1RECV_B\d+ from rank 2: no progress for 500ms \(PPGEN_TIMEOUT\): nothing arrived on grad`)
	if !want.MatchString(fmt.Sprint(errs[1])) || !errors.Is(errs[1], transport.ErrTimeout) {
		t.Errorf("rank 1: %v\nwant it to match %s", errs[1], want)
	}
	// The others hear of it from rank 1's abort (or time out themselves).
	for _, r := range []int{0, 3} {
		if !errors.Is(errs[r], transport.ErrTimeout) && !errors.Is(errs[r], transport.ErrAborted) {
			t.Errorf("rank %d: %v, want a timeout or an abort", r, errs[r])
		}
	}
	close(release)
	if err := <-stuck; err == nil {
		t.Error("stuck rank succeeded although its peers gave up")
	}
}

type panicky struct{ affine }

func (p *panicky) Forward(x *tensor.Dense) (*tensor.Dense, any, error) { panic("kaboom") }

func TestPanicInStageFailsRankAndPeers(t *testing.T) {
	p := progByName(t, "1f1b-P2-V0-M4")
	g := newRig(t, p, inprocWorld(2, 10*time.Second), false)
	// Rebuild rank 1 with a panicking stage.
	g.xs[1].Close()
	x, err := pipe.New(pipe.Config{Rank: 1, Spec: p.spec, Stages: map[int]pipe.Stage{1: &panicky{}}, Loss: mse{}, Data: g.data, Transport: g.trs[1]})
	if err != nil {
		t.Fatal(err)
	}
	g.xs[1] = x
	errs, _ := runRanks(g, rankFns(p, "interp"))
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "panic: kaboom") {
		t.Errorf("rank 1: %v", errs[1])
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1 aborted") {
		t.Errorf("rank 0: %v", errs[0])
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
	spec := onerank.Spec
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
	ops := onerank.Program[0]
	for name, fn := range map[string]func(){
		"straight":  func() { x.Reset(); onerank.Rank0(x) },
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
