package pipe_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// masked is a MultiStage on (hidden [L, W] float64, mask [L] float32):
// y = w * h with the rows whose mask is 0 zeroed; the mask passes through
// and has no gradient. It records the gradient sets its backwards get.
type masked struct {
	w, gw   float64
	gotDys  [][]*tensor.Dense // per backward call
	dxCount int               // how many input gradients BackwardInput returns (0: two, one per input; -1: nil)
}

func (s *masked) Forward(xs []*tensor.Dense) ([]*tensor.Dense, any, error) {
	if len(xs) != 2 {
		return nil, nil, fmt.Errorf("want (hidden, mask), got %d tensors", len(xs))
	}
	h, m := xs[0], xs[1]
	L, W := h.Shape()[0], h.Shape()[1]
	y := make([]float64, L*W)
	for i := range L {
		for j := range W {
			y[i*W+j] = s.w * h.Float64s()[i*W+j] * float64(m.Float32s()[i])
		}
	}
	return []*tensor.Dense{f64(y, L, W), m}, xs, nil
}

func (s *masked) BackwardInput(saved any, dys []*tensor.Dense) ([]*tensor.Dense, error) {
	s.gotDys = append(s.gotDys, dys)
	if s.dxCount < 0 {
		return nil, nil
	}
	xs := saved.([]*tensor.Dense)
	m, dy := xs[1], dys[0]
	L, W := dy.Shape()[0], dy.Shape()[1]
	dx := make([]float64, L*W)
	for i := range L {
		for j := range W {
			dx[i*W+j] = s.w * dy.Float64s()[i*W+j] * float64(m.Float32s()[i])
		}
	}
	out := []*tensor.Dense{f64(dx, L, W), nil}
	for len(out) < s.dxCount {
		out = append(out, nil)
	}
	if s.dxCount > 0 {
		out = out[:s.dxCount]
	}
	return out, nil
}

func (s *masked) BackwardWeight(saved any, dys []*tensor.Dense) error {
	s.gotDys = append(s.gotDys, dys)
	xs := saved.([]*tensor.Dense)
	h, m, dy := xs[0], xs[1], dys[0]
	W := h.Shape()[1]
	for k, v := range dy.Float64s() {
		s.gw += v * h.Float64s()[k] * float64(m.Float32s()[k/W])
	}
	return nil
}

// TestMultiStage runs the adapter's forward and backward on carriers and
// checks the results against the formulas by hand.
func TestMultiStage(t *testing.T) {
	inner := &masked{w: 2, dxCount: 2}
	st := pipe.Multi(inner)
	x, err := pipe.Pack([]*tensor.Dense{f64([]float64{1, 2, 3, 4, 5, 6}, 3, 2), f32([]float32{1, 0, 1}, 3)})
	if err != nil {
		t.Fatal(err)
	}
	y, saved, err := st.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	ys, err := pipe.Unpack(y)
	if err != nil {
		t.Fatal(err)
	}
	sameSet(t, ys, []*tensor.Dense{f64([]float64{2, 4, 0, 0, 10, 12}, 3, 2), f32([]float32{1, 0, 1}, 3)})

	dy, err := pipe.Pack([]*tensor.Dense{f64([]float64{1, 1, 1, 1, 0.5, 0.5}, 3, 2), nil})
	if err != nil {
		t.Fatal(err)
	}
	dx, err := st.BackwardInput(saved, dy)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.BackwardWeight(saved, dy); err != nil {
		t.Fatal(err)
	}
	dxs, err := pipe.Unpack(dx)
	if err != nil {
		t.Fatal(err)
	}
	sameSet(t, dxs, []*tensor.Dense{f64([]float64{2, 2, 0, 0, 1, 1}, 3, 2), nil})
	// gw = sum over kept rows of dy*h: 1*1+1*2 + 0.5*5+0.5*6.
	if want := 8.5; inner.gw != want {
		t.Errorf("weight gradient %v, want %v", inner.gw, want)
	}
	// BackwardWeight got the set BackwardInput unpacked, not a second copy.
	if len(inner.gotDys) != 2 || inner.gotDys[0][0] != inner.gotDys[1][0] || inner.gotDys[0][1] != nil {
		t.Errorf("the backwards got gradient sets %v; want one set, (dh, nil), shared", inner.gotDys)
	}
}

// TestMultiStageErrors: mismatched counts and foreign tensors fail with
// errors that say what is wrong.
func TestMultiStageErrors(t *testing.T) {
	x, err := pipe.Pack([]*tensor.Dense{f64([]float64{1, 2}, 1, 2), f32([]float32{1}, 1)})
	if err != nil {
		t.Fatal(err)
	}
	dy1, _ := pipe.Pack([]*tensor.Dense{f64([]float64{1, 1}, 1, 2)})
	dy2, _ := pipe.Pack([]*tensor.Dense{f64([]float64{1, 1}, 1, 2), nil})
	for _, tc := range []struct {
		name string
		run  func(st pipe.Stage, saved any) error
		want string
	}{
		{"plain input", func(st pipe.Stage, _ any) error {
			_, _, err := st.Forward(f64([]float64{1, 2}, 2))
			return err
		}, "not a tensor set"},
		{"gradient count", func(st pipe.Stage, saved any) error {
			_, err := st.BackwardInput(saved, dy1)
			return err
		}, "1 output gradients for 2 outputs"},
		{"input gradient count", func(st pipe.Stage, saved any) error {
			_, err := st.BackwardInput(saved, dy2)
			return err
		}, "3 input gradients for 2 inputs"},
		{"foreign context", func(st pipe.Stage, _ any) error {
			return st.BackwardWeight("ctx", dy2)
		}, "the context is a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := &masked{w: 1, dxCount: 2}
			st := pipe.Multi(inner)
			_, saved, err := st.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "input gradient count" {
				inner.dxCount = 3
			}
			if err = tc.run(st, saved); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want an error containing %q", err, tc.want)
			}
		})
	}
	// The first stage may return no input gradient at all.
	st := pipe.Multi(&masked{w: 1, dxCount: -1})
	_, saved, err := st.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	if dx, err := st.BackwardInput(saved, dy2); dx != nil || err != nil {
		t.Fatalf("BackwardInput with nil dxs: %v, %v; want nil, nil", dx, err)
	}
}

// The optional interfaces, one type each, to combine.
type (
	swapping struct {
		masked
		offloaded, loaded int
	}
	waiting  struct{ swapping }
	copying  struct{ masked }
	tying    struct{ masked }
	sharding struct {
		masked
		calls []string
	}
	everything struct{ swapping }
)

type swapHandle struct{ saved any }

func (s *swapping) Offload(saved any) (any, error) {
	s.offloaded++
	return swapHandle{saved}, nil
}

func (s *swapping) Load(h any) (any, error) {
	s.loaded++
	return h.(swapHandle).saved, nil
}

func (s *waiting) WaitOffload(h any) error {
	if _, ok := h.(swapHandle); !ok {
		return fmt.Errorf("WaitOffload got a %T, not its handle", h)
	}
	return errors.New("waited")
}

var theGrads = []*tensor.Dense{f64([]float64{1}, 1)}

func (*copying) Grads() []*tensor.Dense        { return theGrads }
func (*tying) TiedGrads() []*tensor.Dense      { return theGrads }
func (*everything) Grads() []*tensor.Dense     { return theGrads }
func (*everything) TiedGrads() []*tensor.Dense { return theGrads }
func (s *sharding) Unshard() error             { s.calls = append(s.calls, "unshard"); return nil }
func (s *sharding) Reshard() error             { s.calls = append(s.calls, "reshard"); return nil }
func (s *sharding) ReduceGrad() error          { s.calls = append(s.calls, "reduce"); return nil }

// TestMultiPassesThrough: the adapter is a Swapper, CopyGrads or Tied
// exactly when the wrapped stage is, and its calls reach the stage's.
func TestMultiPassesThrough(t *testing.T) {
	for _, tc := range []struct {
		name            string
		m               pipe.MultiStage
		swap, copy, tie bool
		waiter, sharded bool
	}{
		{"plain", &masked{}, false, false, false, false, false},
		{"swapper", &swapping{}, true, false, false, false, false},
		{"swap waiter", &waiting{}, true, false, false, true, false},
		{"copies", &copying{}, false, true, false, false, false},
		{"tied", &tying{}, false, false, true, false, false},
		{"sharded", &sharding{}, false, false, false, false, true},
		{"all", &everything{}, true, true, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := pipe.Multi(tc.m)
			sw, isSwap := st.(pipe.Swapper)
			cg, isCopy := st.(pipe.CopyGrads)
			td, isTie := st.(pipe.Tied)
			if isSwap != tc.swap || isCopy != tc.copy || isTie != tc.tie {
				t.Fatalf("Swapper %v, CopyGrads %v, Tied %v; want %v, %v, %v", isSwap, isCopy, isTie, tc.swap, tc.copy, tc.tie)
			}
			if isCopy && cg.Grads()[0] != theGrads[0] {
				t.Error("Grads is not the stage's")
			}
			if isTie && td.TiedGrads()[0] != theGrads[0] {
				t.Error("TiedGrads is not the stage's")
			}
			sh := st.(pipe.Sharded)
			for _, f := range []func() error{sh.Unshard, sh.Reshard, sh.ReduceGrad} {
				if err := f(); err != nil {
					t.Fatal(err)
				}
			}
			if s, ok := tc.m.(*sharding); ok && strings.Join(s.calls, ",") != "unshard,reshard,reduce" {
				t.Errorf("the stage's Sharded calls: %v", s.calls)
			}
			if !isSwap {
				return
			}
			// Offload, wait, load, then the backward runs on the context
			// the stage's Load gave back.
			x, _ := pipe.Pack([]*tensor.Dense{f64([]float64{1, 2}, 1, 2), f32([]float32{1}, 1)})
			_, saved, err := st.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			h, err := sw.Offload(saved)
			if err != nil {
				t.Fatal(err)
			}
			dy, _ := pipe.Pack([]*tensor.Dense{f64([]float64{1, 1}, 1, 2), nil})
			if _, err := st.BackwardInput(h, dy); err == nil {
				t.Error("a backward on a swapped-out context ran")
			}
			err = st.(pipe.SwapWaiter).WaitOffload(h)
			if tc.waiter != (err != nil && err.Error() == "waited") || (!tc.waiter && err != nil) {
				t.Errorf("WaitOffload: %v (the stage is a SwapWaiter: %v)", err, tc.waiter)
			}
			back, err := sw.Load(h)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.BackwardInput(back, dy); err != nil {
				t.Fatal(err)
			}
			// Out again between I and W: W gets the gradient set anew.
			if h, err = sw.Offload(back); err != nil {
				t.Fatal(err)
			}
			if back, err = sw.Load(h); err != nil {
				t.Fatal(err)
			}
			if err := st.BackwardWeight(back, dy); err != nil {
				t.Fatal(err)
			}
			var s *swapping
			switch m := tc.m.(type) {
			case *swapping:
				s = m
			case *waiting:
				s = &m.swapping
			case *everything:
				s = &m.swapping
			}
			if s.offloaded != 2 || s.loaded != 2 {
				t.Errorf("the stage's Offload ran %d times, Load %d; want twice each", s.offloaded, s.loaded)
			}
			if g := s.gotDys; len(g) != 2 || g[0][0] == g[1][0] || g[1][1] != nil {
				t.Fatalf("the backwards got gradient sets %v; want two, unpacked apart (the first was swapped out with the chunk)", g)
			} else {
				sameSet(t, g[1], g[0])
			}
			if want := 1 + 2.0; s.gw != want {
				t.Errorf("weight gradient after the swap %v, want %v", s.gw, want)
			}
		})
	}
}

// sumLoss is a MultiLoss: the sum of the hidden part; dys (ones, nil).
type sumLoss struct{ extra bool }

func (l sumLoss) Loss(ys []*tensor.Dense, _ *tensor.Dense) (float64, []*tensor.Dense, error) {
	s := 0.0
	ones := make([]float64, len(ys[0].Float64s()))
	for i, v := range ys[0].Float64s() {
		s += v
		ones[i] = 1
	}
	dys := []*tensor.Dense{f64(ones, ys[0].Shape().Clone()...), nil}
	if l.extra {
		dys = append(dys, nil)
	}
	return s, dys, nil
}

func TestMultiLossAndData(t *testing.T) {
	data := pipe.MultiBatches{Inputs: [][]*tensor.Dense{{f64([]float64{1, 2}, 1, 2), f32([]float32{1}, 1)}}}
	x, err := data.Input(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := data.Input(1); err == nil {
		t.Error("Input(1) of one micro-batch did not fail")
	}
	loss, dy, err := pipe.MultiLossOf(sumLoss{}).Loss(x, nil)
	if err != nil {
		t.Fatal(err)
	}
	dys, err := pipe.Unpack(dy)
	if err != nil {
		t.Fatal(err)
	}
	if loss != 3 {
		t.Errorf("loss %v, want 3", loss)
	}
	sameSet(t, dys, []*tensor.Dense{f64([]float64{1, 1}, 1, 2), nil})
	if _, _, err := pipe.MultiLossOf(sumLoss{extra: true}).Loss(x, nil); err == nil || !strings.Contains(err.Error(), "3 gradients for 2 outputs") {
		t.Errorf("a loss with 3 gradients for 2 outputs: %v", err)
	}
}

// multiReleasing is a MultiStage that is a Releaser: it records the
// contexts it is handed.
type multiReleasing struct {
	masked
	released []any
}

func (r *multiReleasing) Release(saved any) error { r.released = append(r.released, saved); return nil }

// TestMultiRelease: the adapter hands a Releaser stage its own context
// (not the adapter's), refuses a context of another kind, and does nothing
// for a stage without Release.
func TestMultiRelease(t *testing.T) {
	x, _ := pipe.Pack([]*tensor.Dense{f64([]float64{1, 2}, 1, 2), f32([]float32{1}, 1)})
	r := &multiReleasing{}
	st := pipe.Multi(r).(pipe.Releaser)
	_, saved, err := st.(pipe.Stage).Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(saved); err != nil {
		t.Fatal(err)
	}
	if len(r.released) != 1 || r.released[0] == saved {
		t.Fatalf("the stage was handed %v; want its own context, once", r.released)
	}
	if err := st.Release(struct{}{}); err == nil || !strings.Contains(err.Error(), "Release: the context is a struct {}") {
		t.Errorf("Release of another context: %v", err)
	}
	plain := pipe.Multi(&masked{}).(pipe.Releaser)
	_, saved, err = plain.(pipe.Stage).Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Release(saved); err != nil {
		t.Errorf("Release through a stage without it: %v", err)
	}
}
