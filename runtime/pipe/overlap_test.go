package pipe_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// A one-rank program with two local stages and overlap steps, as data. Every
// chunk (s, m) has its own slot s*M+m, so slots never need reuse; F(1, m)
// reads F(0, m)'s slot and B/I(0, m) reads B/I(1, m)'s slot (src).
const ovStages, ovMicro = 2, 5

type ovTask struct {
	kind         pipe.OpKind
	stage, micro int
}

// ovOrder is the compute order: steps of one or two tasks (an overlap, in
// sub-step order; the kind of the pair follows from which half is the F).
// The comments say how the runtime runs each overlap.
var ovOrder = [][]ovTask{
	{{pipe.OpForward, 0, 0}},
	{{pipe.OpForward, 1, 0}},
	{{pipe.OpBackward, 1, 0}, {pipe.OpForward, 0, 1}}, // concurrent: stages 1 and 0
	{{pipe.OpForward, 1, 1}},
	{{pipe.OpBackward, 0, 0}, {pipe.OpForward, 0, 2}},       // sequential: both on stage 0
	{{pipe.OpForward, 1, 2}, {pipe.OpBackward, 1, 1}},       // sequential: both on stage 1
	{{pipe.OpForward, 0, 3}, {pipe.OpBackwardInput, 1, 2}},  // concurrent
	{{pipe.OpBackwardWeight, 1, 2}, {pipe.OpForward, 0, 4}}, // concurrent, W half
	{{pipe.OpBackward, 0, 1}, {pipe.OpForward, 1, 3}},       // concurrent, F with a src
	{{pipe.OpBackwardInput, 0, 2}, {pipe.OpForward, 1, 4}},  // concurrent, I with a src
	{{pipe.OpBackwardWeight, 0, 2}},
	{{pipe.OpBackward, 1, 3}},
	{{pipe.OpBackward, 0, 3}},
	{{pipe.OpBackward, 1, 4}},
	{{pipe.OpBackward, 0, 4}},
}

var ovSpec = pipe.Spec{Schedule: "overlap-test", Ranks: 1, Stages: ovStages, Micro: ovMicro,
	Slots: []int{ovStages * ovMicro}, RankOf: []int{0, 0}, Fingerprint: "test:overlap"}

// ovOp is the op of one task: its slot, and its src where a local neighbour
// feeds it.
func ovOp(t ovTask) pipe.Op {
	o := pipe.Op{Kind: t.kind, Stage: int32(t.stage), Micro: int32(t.micro), Peer: -1, Slot: int32(t.stage*ovMicro + t.micro), Src: -1}
	switch {
	case t.kind == pipe.OpForward && t.stage > 0:
		o.Src = int32((t.stage-1)*ovMicro + t.micro)
	case (t.kind == pipe.OpBackward || t.kind == pipe.OpBackwardInput) && t.stage < ovStages-1:
		o.Src = int32((t.stage+1)*ovMicro + t.micro)
	}
	return o
}

func overlapKind(pair []ovTask) pipe.OpKind {
	if pair[0].kind == pipe.OpForward {
		return pipe.OpOverlapFB
	}
	return pipe.OpOverlapBF
}

// ovOps is the program as data for Interpret: data loads before the F of
// stage 0 (input) and of the last stage (labels), an overlap as its header
// and two sub-step ops.
func ovOps() []pipe.Op {
	var ops []pipe.Op
	load := func(t ovTask) {
		if t.kind == pipe.OpForward && (t.stage == 0 || t.stage == ovStages-1) {
			ops = append(ops, pipe.Op{Kind: pipe.OpDataLoad, Stage: int32(t.stage), Micro: int32(t.micro), Peer: -1, Slot: int32(t.stage*ovMicro + t.micro), Src: -1})
		}
	}
	for _, step := range ovOrder {
		for _, t := range step {
			load(t)
		}
		if len(step) == 2 {
			ops = append(ops, pipe.Op{Kind: overlapKind(step), Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1})
		}
		for _, t := range step {
			ops = append(ops, ovOp(t))
		}
	}
	return append(ops, pipe.Op{Kind: pipe.OpOptStep, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1})
}

// ovStraight runs the program as generated code does: one direct call per step.
func ovStraight(x *pipe.Exec) error {
	for _, step := range ovOrder {
		for _, t := range step {
			if t.kind == pipe.OpForward && (t.stage == 0 || t.stage == ovStages-1) {
				run(x, load(t.stage, t.micro, t.stage*ovMicro+t.micro))
			}
		}
		if len(step) == 1 {
			o := ovOp(step[0])
			switch o.Kind {
			case pipe.OpForward:
				run(x, fwd(int(o.Stage), int(o.Micro), int(o.Slot), int(o.Src)))
			case pipe.OpBackward:
				run(x, bwd(int(o.Stage), int(o.Micro), int(o.Slot), int(o.Src)))
			case pipe.OpBackwardInput:
				run(x, bwdInput(int(o.Stage), int(o.Micro), int(o.Slot), int(o.Src)))
			case pipe.OpBackwardWeight:
				run(x, bwdWeight(int(o.Stage), int(o.Micro), int(o.Slot)))
			}
			continue
		}
		a, b := ovOp(step[0]), ovOp(step[1])
		if overlapKind(step) == pipe.OpOverlapFB {
			x.OverlapFB(int(a.Stage), int(a.Micro), int(a.Slot), int(a.Src), b.Kind, int(b.Stage), int(b.Micro), int(b.Slot), int(b.Src))
		} else {
			x.OverlapBF(a.Kind, int(a.Stage), int(a.Micro), int(a.Slot), int(a.Src), int(b.Stage), int(b.Micro), int(b.Slot), int(b.Src))
		}
	}
	x.OptStep()
	return x.Err()
}

// newOvExec returns the one-rank Exec of the overlap program over stages.
func newOvExec(t testing.TB, stages []pipe.Stage, d *data, serial bool, opt func() error) *pipe.Exec {
	t.Helper()
	held := map[int]pipe.Stage{}
	for s, st := range stages {
		held[s] = st
	}
	x, err := pipe.New(pipe.Config{Rank: 0, Spec: ovSpec, Stages: held, Loss: mse{}, Data: d, OptStep: opt, SerialOverlap: serial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

func ovRunner(mode string) func(*pipe.Exec) error {
	ops := ovOps()
	switch mode {
	case "interp":
		return func(x *pipe.Exec) error { return pipe.Interpret(x, ops) }
	}
	return ovStraight
}

// TestOverlapMatchesSequential: the overlap program, concurrent or serial,
// as direct calls and through Interpret, trains
// exactly as sequential training does.
func TestOverlapMatchesSequential(t *testing.T) {
	for _, mode := range []string{"straight", "interp"} {
		for _, serial := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/serial=%v", mode, serial), func(t *testing.T) {
				stages := newStages(ovStages)
				d := &data{}
				x := newOvExec(t, []pipe.Stage{stages[0], stages[1]}, d, serial, func() error {
					for _, s := range stages {
						s.Step()
					}
					return nil
				})
				var got [][]float64
				for it := range 3 {
					d.Iter = it
					if err := pipe.Run(x, ovRunner(mode)); err != nil {
						t.Fatalf("iteration %d: %v", it, err)
					}
					got = append(got, x.Losses())
				}
				ref := newStages(ovStages)
				want := sequential(ref, ovMicro, 3, false)
				for it := range want {
					if !sameFloats(got[it], want[it]) {
						t.Errorf("iteration %d losses:\n got %v\nwant %v", it, got[it], want[it])
					}
				}
				for s := range ref {
					if stages[s].A != ref[s].A || stages[s].B != ref[s].B {
						t.Errorf("stage %d params: got (%v, %v), want (%v, %v)", s, stages[s].A, stages[s].B, ref[s].A, ref[s].B)
					}
				}
			})
		}
	}
}

// probe is an affine stage that records how many stage calls run at once:
// over all probes sharing active/peak, and on itself (busy), where a second
// concurrent call is a violation.
type probe struct {
	affine
	active, peak *atomic.Int32
	busy         atomic.Bool
	violations   *atomic.Int32
}

func (p *probe) enter() {
	if !p.busy.CompareAndSwap(false, true) {
		p.violations.Add(1)
	}
	n := p.active.Add(1)
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			break
		}
	}
	time.Sleep(time.Millisecond)
}

func (p *probe) leave() {
	p.active.Add(-1)
	p.busy.Store(false)
}

func (p *probe) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	p.enter()
	defer p.leave()
	return p.affine.Forward(x)
}

func (p *probe) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	p.enter()
	defer p.leave()
	return p.affine.BackwardInput(saved, dy)
}

func (p *probe) BackwardWeight(saved any, dy *tensor.Dense) error {
	p.enter()
	defer p.leave()
	return p.affine.BackwardWeight(saved, dy)
}

// TestOverlapSerialPaths: with SerialOverlap, or with one stage object for
// both stages, no two stage calls ever run at once, and in every mode no
// stage object is used by two goroutines at once (the same-stage overlaps of
// ovOrder run their halves one after the other).
func TestOverlapSerialPaths(t *testing.T) {
	for _, tc := range []struct {
		name   string
		serial bool
		shared bool // one stage object for both stages
		peak   int32
	}{
		{"concurrent", false, false, 2},
		{"SerialOverlap", true, false, 1},
		{"one stage object", false, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var active, peak, violations atomic.Int32
			mk := func() *probe {
				return &probe{affine: affine{A: 1}, active: &active, peak: &peak, violations: &violations}
			}
			p0, p1 := mk(), mk()
			if tc.shared {
				p1 = p0
			}
			x := newOvExec(t, []pipe.Stage{p0, p1}, &data{}, tc.serial, nil)
			for it := range 3 {
				if err := pipe.Run(x, ovStraight); err != nil {
					t.Fatalf("iteration %d: %v", it, err)
				}
			}
			if v := violations.Load(); v != 0 {
				t.Errorf("%d stage calls overlapped a call on the same stage object", v)
			}
			// Concurrency shows only when the two goroutines overlap in time,
			// which the 1 ms per call makes near certain but not guaranteed;
			// TestOverlapRunsConcurrently proves it deterministically.
			if got := peak.Load(); got > tc.peak || (tc.peak == 1 && got != 1) {
				t.Errorf("peak concurrent stage calls %d, want %d", got, tc.peak)
			}
		})
	}
}

// gate is an affine stage whose call of kind `wait` blocks until `other`
// is closed, and which closes `mine` when its call of kind `signal` starts:
// two gates deadlock (and time out) unless their calls run concurrently.
type gate struct {
	affine
	wait, signal string
	mine, other  chan struct{}
	once         sync.Once
}

func (g *gate) at(kind string) error {
	if kind == g.signal {
		g.once.Do(func() { close(g.mine) })
	}
	if kind == g.wait {
		select {
		case <-g.other:
		case <-time.After(10 * time.Second):
			return errors.New("the other half of the overlap never started: the halves did not run concurrently")
		}
	}
	return nil
}

func (g *gate) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	if err := g.at("F"); err != nil {
		return nil, nil, err
	}
	return g.affine.Forward(x)
}

func (g *gate) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	if err := g.at("I"); err != nil {
		return nil, err
	}
	return g.affine.BackwardInput(saved, dy)
}

// TestOverlapRunsConcurrently: the two halves of an overlap on different
// stage objects run at the same time. Stage 0's forward of micro-batch 1
// waits until stage 1's backward has started and vice versa, which only
// completes when they run concurrently; it does in each of (B;F) and (F;B)
// order, directly and through Interpret.
func TestOverlapRunsConcurrently(t *testing.T) {
	for _, kind := range []pipe.OpKind{pipe.OpOverlapBF, pipe.OpOverlapFB} {
		for _, interp := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/interpret=%v", kind, interp), func(t *testing.T) {
				a, b := make(chan struct{}), make(chan struct{})
				// Stage 0 blocks in its second forward (micro 1) only: its
				// first (micro 0) runs alone, so it gates on its own signal.
				g0 := &gate{affine: affine{A: 1}, signal: "F", mine: a, other: b}
				g1 := &gate{affine: affine{A: 1}, signal: "I", wait: "I", mine: b, other: a}
				x := newOvExec(t, []pipe.Stage{g0, g1}, &data{}, false, nil)
				run := func(x *pipe.Exec) error {
					run(x, load(0, 0, 0))
					run(x, fwd(0, 0, 0, -1))
					run(x, load(1, 0, 5))
					run(x, fwd(1, 0, 5, 0))
					run(x, load(0, 1, 1))
					g0.wait = "F" // from here on, stage 0's forward waits for stage 1's backward
					if interp {
						ops := []pipe.Op{
							{Kind: kind, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1},
							{Kind: pipe.OpBackward, Stage: 1, Micro: 0, Peer: -1, Slot: 5, Src: -1},
							{Kind: pipe.OpForward, Stage: 0, Micro: 1, Peer: -1, Slot: 1, Src: -1},
						}
						if kind == pipe.OpOverlapFB {
							ops[1], ops[2] = ops[2], ops[1]
						}
						return pipe.Interpret(x, ops)
					}
					if kind == pipe.OpOverlapBF {
						x.OverlapBF(pipe.OpBackward, 1, 0, 5, -1, 0, 1, 1, -1)
					} else {
						x.OverlapFB(0, 1, 1, -1, pipe.OpBackward, 1, 0, 5, -1)
					}
					return x.Err()
				}
				if err := pipe.Run(x, run); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestOverlapErrors: misuse of the overlap calls and ops fails the rank with
// a StepError naming the composite or the failing half.
func TestOverlapErrors(t *testing.T) {
	header := func(k pipe.OpKind) pipe.Op {
		return pipe.Op{Kind: k, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1}
	}
	fwd := pipe.Op{Kind: pipe.OpForward, Stage: 0, Micro: 0, Peer: -1, Slot: 0, Src: -1}
	bwd := pipe.Op{Kind: pipe.OpBackward, Stage: 1, Micro: 1, Peer: -1, Slot: 6, Src: -1}
	cases := []struct {
		name string
		fn   func(x *pipe.Exec) error
		want string
	}{
		{"backward kind", func(x *pipe.Exec) error {
			x.OverlapFB(0, 0, 0, -1, pipe.OpForward, 1, 1, 6, -1)
			return x.Err()
		}, "pipe: rank 0 step (0F0;1F1)OVERLAP_F_B: the backward half is F; want B, I or W"},
		{"W with src", func(x *pipe.Exec) error {
			x.OverlapBF(pipe.OpBackwardWeight, 1, 1, 6, 2, 0, 0, 0, -1)
			return x.Err()
		}, "pipe: rank 0 step (1W1;0F0)OVERLAP_B_F: W takes no source slot; want src -1, got 2"},
		{"half without its chunk", func(x *pipe.Exec) error {
			run(x, load(0, 0, 0))
			x.OverlapFB(0, 0, 0, -1, pipe.OpBackward, 1, 1, 6, -1)
			return x.Err()
		}, "pipe: rank 0 step 1B1: slot 6 holds no chunk"},
		{"half out of range", func(x *pipe.Exec) error {
			run(x, load(0, 0, 0))
			x.OverlapBF(pipe.OpBackwardInput, 1, 9, 6, -1, 0, 0, 0, -1)
			return x.Err()
		}, "pipe: rank 0 step 1I9: micro-batch 9 outside [0, 5)"},
		{"interpret: header at the end", func(x *pipe.Exec) error {
			return pipe.Interpret(x, []pipe.Op{header(pipe.OpOverlapBF), bwd})
		}, "pipe: rank 0 step op #0: OVERLAP_B_F header without its two sub-step ops"},
		{"interpret: sub-step order", func(x *pipe.Exec) error {
			return pipe.Interpret(x, []pipe.Op{header(pipe.OpOverlapBF), fwd, bwd})
		}, "pipe: rank 0 step op #0: OVERLAP_B_F header followed by F and B; want B, I or W then F"},
		{"interpret: sub-step kinds", func(x *pipe.Exec) error {
			return pipe.Interpret(x, []pipe.Op{header(pipe.OpOverlapFB), fwd, fwd})
		}, "pipe: rank 0 step op #0: OVERLAP_F_B header followed by F and F; want F then B, I or W"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := newStages(2)
			x := newOvExec(t, []pipe.Stage{st[0], st[1]}, &data{}, false, nil)
			err := tc.fn(x)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant %q", err, tc.want)
			}
			var se *pipe.StepError
			if !errors.As(err, &se) || se.Rank != 0 {
				t.Fatalf("not a StepError of rank 0: %#v", err)
			}
			x.OverlapFB(0, 1, 1, -1, pipe.OpBackward, 1, 0, 5, -1) // no-op after the error
			if x.Err() != err {
				t.Fatalf("error not sticky: %v", x.Err())
			}
		})
	}
}

// panicStage panics in its second forward.
type panicStage struct {
	affine
	calls int
}

func (p *panicStage) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	if p.calls++; p.calls == 2 {
		panic("kaboom")
	}
	return p.affine.Forward(x)
}

// TestOverlapHalfFails: when the half of a concurrent overlap that runs on
// the second goroutine fails (an error or a panic), the rank fails with that
// half's error, Run returns it, and later steps are skipped.
func TestOverlapHalfFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stage pipe.Stage
		want  string
	}{
		{"error", &affine{A: 1, FailAt: func(kind string, call int) error {
			if call == 1 {
				return errors.New("injected")
			}
			return nil
		}}, "pipe: rank 0 step 0F1: injected"},
		{"panic", &panicStage{affine: affine{A: 1}}, "pipe: rank 0 step 0F1: panic: kaboom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s1 := &affine{A: 1}
			x := newOvExec(t, []pipe.Stage{tc.stage, s1}, &data{}, false, nil)
			err := pipe.Run(x, func(x *pipe.Exec) error {
				run(x, load(0, 0, 0))
				run(x, fwd(0, 0, 0, -1))
				run(x, load(1, 0, 5))
				run(x, fwd(1, 0, 5, 0))
				run(x, load(0, 1, 1))
				x.OverlapBF(pipe.OpBackwardInput, 1, 0, 5, -1, 0, 1, 1, -1) // F(0, 1) fails
				run(x, bwdWeight(1, 0, 5))                                  // skipped
				return x.Err()
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant %q", err, tc.want)
			}
			if len(s1.GA) != 0 {
				t.Errorf("stage 1 ran W after the failure")
			}
		})
	}
}
