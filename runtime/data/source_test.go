package data

import (
	"fmt"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
)

var _ pipe.DataSource = (*Source)(nil)

// recorder is an identity stage and a loss that record what they see.
type recorder struct{ inputs, targets []string }

func (r *recorder) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	r.inputs = append(r.inputs, fmt.Sprint(x.Data()))
	return x, nil, nil
}
func (r *recorder) BackwardInput(any, *tensor.Dense) (*tensor.Dense, error) { return nil, nil }
func (r *recorder) BackwardWeight(any, *tensor.Dense) error                 { return nil }
func (r *recorder) Loss(y, target *tensor.Dense) (float64, *tensor.Dense, error) {
	r.targets = append(r.targets, fmt.Sprint(target.Data()))
	return 0, y, nil
}

// TestSourceInPipe: a pipeline's DATA_LOAD steps read the sampler's
// windows through a Source: micro-batch m's input and target are its
// windows' tokens, shifted by one.
func TestSourceInPipe(t *testing.T) {
	shards := testShards(t, 3000)
	s, err := NewSampler(shards, Config{Seed: 9, SeqLen: 3, Batch: 2, Micro: 2, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(tensor.Float64, 3)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	sp := pipe.Spec{Schedule: "test-data", Ranks: 1, Stages: 1, Micro: 2, Slots: []int{2}, RankOf: []int{0}, Fingerprint: "test:data"}
	x, err := pipe.New(pipe.Config{Spec: sp, Stages: map[int]pipe.Stage{0: rec}, Loss: rec, Data: src})
	if err != nil {
		t.Fatal(err)
	}
	op := func(k pipe.OpKind, micro int) pipe.Op {
		return pipe.Op{Kind: k, Stage: 0, Micro: int32(micro), Peer: -1, Slot: int32(micro), Src: -1}
	}
	ops := []pipe.Op{op(pipe.OpDataLoad, 0), op(pipe.OpForward, 0), op(pipe.OpDataLoad, 1), op(pipe.OpForward, 1),
		op(pipe.OpBackward, 0), op(pipe.OpBackward, 1)}
	st, err := s.Read(4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Set(st); err != nil {
		t.Fatal(err)
	}
	if err := pipe.Interpret(x, ops); err != nil {
		t.Fatal(err)
	}
	for m, toks := range st.Tokens {
		var in, tg []float64
		for w := 0; w < len(toks); w += 4 {
			for j := range 3 {
				in, tg = append(in, float64(toks[w+j])), append(tg, float64(toks[w+j+1]))
			}
		}
		if rec.inputs[m] != fmt.Sprint(in) || rec.targets[m] != fmt.Sprint(tg) {
			t.Errorf("micro-batch %d: the stage saw %s and the loss %s; the windows hold %v and %v", m, rec.inputs[m], rec.targets[m], in, tg)
		}
	}
}

// TestSource: a Step's windows become input and target columns shifted by
// one token, in either dtype; bad steps and micro-batches are refused.
func TestSource(t *testing.T) {
	st := &Step{Step: 4, Tokens: [][]uint32{{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}}}
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		src, err := NewSource(dt, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Set(st); err != nil {
			t.Fatal(err)
		}
		x, err := src.Input(1)
		if err != nil {
			t.Fatal(err)
		}
		y, _ := src.Target(1)
		if fmt.Sprint(x.Shape(), x.Data(), y.Data()) != "(4, 1) [7 8 10 11] [8 9 11 12]" || x.Dtype() != dt {
			t.Errorf("%v: input %v %v, target %v", dt, x.Shape(), x.Data(), y.Data())
		}
		if _, err := src.Input(2); err == nil {
			t.Error("micro-batch 2 accepted")
		}
		if _, err := src.Target(-1); err == nil {
			t.Error("micro-batch -1 accepted")
		}
	}
	src, _ := NewSource(tensor.Float64, 2)
	if err := src.Set(&Step{Tokens: [][]uint32{{1, 2, 3, 4}}}); err == nil || !strings.Contains(err.Error(), "not whole windows of 3") {
		t.Errorf("ragged step: %v", err)
	}
	src32, _ := NewSource(tensor.Float32, 1)
	if err := src32.Set(&Step{Tokens: [][]uint32{{1, 1 << 24}}}); err == nil || !strings.Contains(err.Error(), "token 16777216 at 1 is not exact in float32") {
		t.Errorf("float32 and a token of 2^24: %v", err)
	}
	if _, err := NewSource(tensor.Int, 2); err == nil {
		t.Error("int dtype accepted")
	}
	if _, err := NewSource(tensor.Float64, 0); err == nil {
		t.Error("sequence length 0 accepted")
	}
}
