package pipe_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// twinAffine is an affine stage of a program with two model copies: Grads
// hands OptStep the sums of its accumulated gradients, step applies them
// after OptStep added the twin's.
type twinAffine struct {
	*affine
	g *tensor.Dense // [ga, gb]
}

func (s *twinAffine) Grads() []*tensor.Dense {
	s.g = tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{sortedSum(s.GA), sortedSum(s.GB)}))
	return []*tensor.Dense{s.g}
}

func (s *twinAffine) step() {
	d := s.g.Float64s()
	s.A -= lr * d[0]
	s.B -= lr * d[1]
	s.GA, s.GB = s.GA[:0], s.GB[:0]
}

// copiesProgram is a dualpipe-shaped program on two ranks: a 2-stage model
// in two copies, stages 0-1 (copy A, on ranks 0 and 1) and 2-3 (copy B, on
// ranks 1 and 0); micro-batches 0-1 run through copy A, 2-3 through copy B.
// Each copy runs GPipe; the transfers are ordered so that every send meets
// its receive.
func copiesProgram() (pipe.Spec, [][]pipe.Op) {
	sp := pipe.Spec{Schedule: "test-copies", Ranks: 2, Stages: 4, Micro: 4, Slots: []int{4, 4}, RankOf: []int{0, 1, 1, 0}, Fingerprint: "test:copies", Copies: 2}
	op := func(k pipe.OpKind, stage, micro, peer, slot int) pipe.Op {
		return pipe.Op{Kind: k, Stage: int32(stage), Micro: int32(micro), Peer: int32(peer), Slot: int32(slot), Src: -1}
	}
	var r0, r1 []pipe.Op
	// Rank 0: stage 0 (copy A's first) and stage 3 (copy B's last).
	for m := range 2 {
		r0 = append(r0, op(pipe.OpDataLoad, 0, m, -1, m), op(pipe.OpForward, 0, m, -1, m), op(pipe.OpSendF, 0, m, 1, m))
	}
	for m := 2; m < 4; m++ {
		r0 = append(r0, op(pipe.OpDataLoad, 3, m, -1, m), op(pipe.OpRecvF, 3, m, 1, m), op(pipe.OpForward, 3, m, -1, m))
	}
	for m := 2; m < 4; m++ {
		r0 = append(r0, op(pipe.OpBackward, 3, m, -1, m), op(pipe.OpSendB, 3, m, 1, m))
	}
	for m := range 2 {
		r0 = append(r0, op(pipe.OpRecvB, 0, m, 1, m), op(pipe.OpBackward, 0, m, -1, m))
	}
	// Rank 1: stage 1 (copy A's last) and stage 2 (copy B's first).
	for m := range 2 {
		r1 = append(r1, op(pipe.OpDataLoad, 1, m, -1, m), op(pipe.OpRecvF, 1, m, 0, m), op(pipe.OpForward, 1, m, -1, m))
	}
	for m := 2; m < 4; m++ {
		r1 = append(r1, op(pipe.OpDataLoad, 2, m, -1, m), op(pipe.OpForward, 2, m, -1, m), op(pipe.OpSendF, 2, m, 0, m))
	}
	for m := range 2 {
		r1 = append(r1, op(pipe.OpBackward, 1, m, -1, m), op(pipe.OpSendB, 1, m, 0, m))
	}
	for m := 2; m < 4; m++ {
		r1 = append(r1, op(pipe.OpRecvB, 2, m, 0, m), op(pipe.OpBackward, 2, m, -1, m))
	}
	opt := pipe.Op{Kind: pipe.OpOptStep, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1}
	return sp, [][]pipe.Op{append(r0, opt), append(r1, opt)}
}

// TestTwoModelCopiesMatchSequential: a program with two model copies, each
// copy's stages starting from the same weights, trains like one model on all
// micro-batches: OptStep sums the copies' gradients, so after every
// iteration both copies hold the sequential model's parameters, and the
// losses (half computed on each rank) are the sequential ones.
func TestTwoModelCopiesMatchSequential(t *testing.T) {
	sp, ops := copiesProgram()
	for _, tk := range []string{"inproc", "tcp"} {
		t.Run(tk, func(t *testing.T) {
			var trs []transport.Transport
			if tk == "inproc" {
				trs = inprocWorld(2, 20*time.Second)
			} else {
				trs = tcpWorld(t, 2, sp.Fingerprint, nil)
			}
			model := newStages(2) // the model each copy starts from
			stages := make([]*twinAffine, 4)
			for s := range stages {
				m := *model[s%2]
				stages[s] = &twinAffine{affine: &m}
			}
			d := &data{}
			var xs []*pipe.Exec
			for r := range 2 {
				held := map[int]pipe.Stage{}
				var mine []*twinAffine
				for s, rr := range sp.RankOf {
					if rr == r {
						held[s] = stages[s]
						mine = append(mine, stages[s])
					}
				}
				x, err := pipe.New(pipe.Config{Rank: r, Spec: sp, Stages: held, Loss: mse{}, Data: d, Transport: trs[r],
					OptStep: func() error {
						for _, s := range mine {
							s.step()
						}
						return nil
					}})
				if err != nil {
					t.Fatal(err)
				}
				defer x.Close()
				xs = append(xs, x)
			}
			ref := newStages(2)
			want := sequential(ref, 4, 3, false)
			for it := range 3 {
				d.Iter = it
				if err := pipe.RunAll(xs, []func(*pipe.Exec) error{
					func(x *pipe.Exec) error { return pipe.Interpret(x, ops[0]) },
					func(x *pipe.Exec) error { return pipe.Interpret(x, ops[1]) },
				}); err != nil {
					t.Fatalf("iteration %d: %v", it, err)
				}
				// Copy A's losses are on rank 1 (stage 1), copy B's on rank 0.
				got := append(xs[1].Losses()[:2], xs[0].Losses()[2:]...)
				for m := range got {
					if !near(got[m], want[it][m]) {
						t.Errorf("iteration %d micro %d: loss %v, sequential %v", it, m, got[m], want[it][m])
					}
				}
			}
			for s, st := range stages {
				r := ref[s%2]
				if !near(st.A, r.A) || !near(st.B, r.B) {
					t.Errorf("stage %d (copy %c): (%v, %v), sequential (%v, %v)", s, "AB"[s/2], st.A, st.B, r.A, r.B)
				}
			}
			if stages[0].A != stages[2].A || stages[1].B != stages[3].B {
				t.Errorf("the copies differ: %v/%v and %v/%v", stages[0].A, stages[2].A, stages[1].B, stages[3].B)
			}
		})
	}
}

// near reports a relative difference of at most 1e-12: the copies sum
// their gradients in another order than sequential training does.
func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-12*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// TestCopiesNeedCopyGrads: a stage without Grads is refused by New, and a
// micro-batch off its copy's route by the step.
func TestCopiesNeedCopyGrads(t *testing.T) {
	sp, _ := copiesProgram()
	trs := inprocWorld(2, time.Second)
	_, err := pipe.New(pipe.Config{Rank: 0, Spec: sp, Stages: map[int]pipe.Stage{0: &affine{}, 3: &affine{}}, Loss: mse{}, Data: &data{}, Transport: trs[0]})
	if err == nil || !strings.Contains(err.Error(), "does not implement pipe.CopyGrads") {
		t.Errorf("err = %v", err)
	}
	x, err := pipe.New(pipe.Config{Rank: 0, Spec: sp, Stages: map[int]pipe.Stage{0: &twinAffine{affine: &affine{}}, 3: &twinAffine{affine: &affine{}}}, Loss: mse{}, Data: &data{}, Transport: trs[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	run(x, load(0, 3, 0)) // micro-batch 3 runs copy B
	if err := x.Err(); err == nil || !strings.Contains(err.Error(), "micro-batch 3 runs model copy 1 (stages 2-3), not stage 0") {
		t.Errorf("err = %v", err)
	}
	for _, bad := range []pipe.Spec{
		{Schedule: "t", Ranks: 1, Stages: 3, Micro: 2, Slots: []int{1}, RankOf: []int{0, 0, 0}, Copies: 2},
		{Schedule: "t", Ranks: 1, Stages: 2, Micro: 2, Slots: []int{1}, RankOf: []int{0, 0}, Copies: 3},
	} {
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "Copies") {
			t.Errorf("Validate(%+v) = %v", bad, err)
		}
	}
}

// TestCopiesOffRouteReceive: a receive claiming a slot for a micro-batch of
// the other copy fails like a data load does.
func TestCopiesOffRouteReceive(t *testing.T) {
	sp, _ := copiesProgram()
	trs := inprocWorld(2, time.Second)
	x, err := pipe.New(pipe.Config{Rank: 1, Spec: sp, Stages: map[int]pipe.Stage{1: &twinAffine{affine: &affine{}}, 2: &twinAffine{affine: &affine{}}}, Loss: mse{}, Data: &data{}, Transport: trs[1]})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	run(x, recvAct(1, 2, 0, 0)) // micro-batch 2 runs copy B: stage 1 is not on its route
	if err := x.Err(); err == nil || !strings.Contains(err.Error(), "micro-batch 2 runs model copy 1 (stages 2-3), not stage 1") {
		t.Errorf("err = %v", err)
	}
}

// extraGrads is a twinAffine whose Grads list has one more tensor than its
// twin's: a model whose two copies disagree.
type extraGrads struct{ *twinAffine }

func (s extraGrads) Grads() []*tensor.Dense {
	return append(s.twinAffine.Grads(), tensor.New(tensor.WithShape(3), tensor.WithBacking(make([]float64, 3))))
}

// TestCopiesGradListsDiffer: when a stage's Grads list differs from its
// twin's (here on the other rank), both ranks fail at OPT_STEP naming both
// stages and both lists, instead of one waiting for a tensor the other
// never sends (which only the progress timeout would end).
func TestCopiesGradListsDiffer(t *testing.T) {
	sp, ops := copiesProgram()
	trs := inprocWorld(2, time.Minute) // far above the test's run time: a hang would time the test out
	model := newStages(2)
	held := []map[int]pipe.Stage{{}, {}}
	for s, r := range sp.RankOf {
		m := *model[s%2]
		var st pipe.Stage = &twinAffine{affine: &m}
		if s == 2 { // rank 1's copy-B first stage, twin of rank 0's stage 0
			st = extraGrads{&twinAffine{affine: &m}}
		}
		held[r][s] = st
	}
	var xs []*pipe.Exec
	for r := range 2 {
		x, err := pipe.New(pipe.Config{Rank: r, Spec: sp, Stages: held[r], Loss: mse{}, Data: &data{}, Transport: trs[r], OptStep: func() error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		xs = append(xs, x)
	}
	done := make(chan error, 1)
	go func() {
		done <- pipe.RunAll(xs, []func(*pipe.Exec) error{
			func(x *pipe.Exec) error { return pipe.Interpret(x, ops[0]) },
			func(x *pipe.Exec) error { return pipe.Interpret(x, ops[1]) },
		})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the ranks hung on the mismatched lists")
	}
	for r, x := range xs {
		err := x.Err()
		if err == nil || !strings.Contains(err.Error(), "stage 0's model-copy gradients are 1 (float64 [2]) and stage 2's 2 (float64 [2], float64 [3])") {
			t.Errorf("rank %d: %v; want both stages' lists named", r, err)
		}
	}
}
