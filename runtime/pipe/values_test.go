package pipe_test

import (
	"strings"
	"testing"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/value"
)

// arr is a third array library, for the adapter's tests: float64 elements
// and a shape. Its Maker counts the values it makes and views.
type arr struct {
	shape []int
	data  []float64
	copy  bool // Aliased reports false
}

func (v *arr) Dtype() value.Dtype { return value.Float64 }
func (v *arr) Shape() []int       { return v.shape }
func (v *arr) Aliased() bool      { return !v.copy }
func (v *arr) Bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v.data))), 8*len(v.data))
}

type arrs struct{ made, viewed *int }

func (m arrs) Make(dt value.Dtype, shape []int) (value.Value, []byte, error) {
	n, err := value.Size(dt, shape)
	if err != nil {
		return nil, nil, err
	}
	*m.made++
	v := &arr{shape: append([]int(nil), shape...), data: make([]float64, n/8)}
	return v, v.Bytes(), nil
}

func (m arrs) View(dt value.Dtype, shape []int, buf []byte) (value.Value, bool) {
	if dt != value.Float64 || uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%8 != 0 {
		return nil, false
	}
	*m.viewed++
	return &arr{shape: append([]int(nil), shape...), data: unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)/8)}, true
}

func newArrs() arrs { return arrs{new(int), new(int)} }

// scale is y = w·x on arrs, with dw += Σ x·dy and dx = w·dy.
type scale struct {
	w, dw  *arr
	lastX  *arr
	gotDys []value.Value
}

func newScale(w float64) *scale {
	return &scale{w: &arr{shape: []int{1}, data: []float64{w}}, dw: &arr{shape: []int{1}, data: []float64{0}}}
}

func (s *scale) Forward(x value.Value) (value.Value, any, error) {
	xv := x.(*arr) // the adapter hands over values of its Maker's library
	s.lastX = xv
	y := &arr{shape: xv.shape, data: make([]float64, len(xv.data))}
	for i, v := range xv.data {
		y.data[i] = s.w.data[0] * v
	}
	return y, xv, nil
}

func (s *scale) BackwardInput(_ any, dy value.Value) (value.Value, error) {
	s.gotDys = append(s.gotDys, dy)
	d := dy.(*arr)
	dx := &arr{shape: d.shape, data: make([]float64, len(d.data))}
	for i, v := range d.data {
		dx.data[i] = s.w.data[0] * v
	}
	return dx, nil
}

func (s *scale) BackwardWeight(saved any, dy value.Value) error {
	s.gotDys = append(s.gotDys, dy)
	x, d := saved.(*arr), dy.(*arr)
	for i := range x.data {
		s.dw.data[0] += x.data[i] * d.data[i]
	}
	return nil
}

type scaleAll struct{ *scale }

func (s scaleAll) Grads() []value.Value           { return []value.Value{s.dw} }
func (s scaleAll) TiedGrads() []value.Value       { return []value.Value{s.dw} }
func (s scaleAll) Offload(saved any) (any, error) { return [1]any{saved}, nil }
func (s scaleAll) Load(h any) (any, error)        { return h.([1]any)[0], nil }

// TestFromValues: the adapter runs a stage of another library on the
// runtime's tensors: the stage gets values of its library, viewing the
// tensors' memory; its outputs come back as tensors over theirs; a chunk's
// output gradient is converted once.
func TestFromValues(t *testing.T) {
	inner := newScale(3)
	m := newArrs()
	st, err := pipe.FromValues(inner, m)
	if err != nil {
		t.Fatal(err)
	}
	x := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float64{1, 2, 3, 4}))
	y, saved, err := st.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	if got := y.Float64s(); !y.Shape().Eq(tensor.Shape{2, 2}) || got[0] != 3 || got[3] != 12 {
		t.Fatalf("y = %v %v, want 3·x", y.Shape(), got)
	}
	dy := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float64{1, 0, 0, 0.5}))
	dx, err := st.BackwardInput(saved, dy)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.BackwardWeight(saved, dy); err != nil {
		t.Fatal(err)
	}
	if got := dx.Float64s(); got[0] != 3 || got[3] != 1.5 {
		t.Errorf("dx = %v, want 3·dy", got)
	}
	if want := 1*1 + 4*0.5; inner.dw.data[0] != want {
		t.Errorf("dw = %v, want %v", inner.dw.data[0], want)
	}
	if len(inner.gotDys) != 2 || inner.gotDys[0] != inner.gotDys[1] {
		t.Errorf("the backwards got %d gradient values, not one shared", len(inner.gotDys))
	}
	if *m.made != 0 || *m.viewed != 2 {
		t.Errorf("the Maker made %d and viewed %d values; want 0 and 2 (x and dy, viewed)", *m.made, *m.viewed)
	}
	// x's value viewed x's memory.
	if &x.Float64s()[0] != &inner.lastX.data[0] {
		t.Error("the stage's input does not view the tensor")
	}
	for _, iface := range []string{"Swapper", "CopyGrads", "Tied"} {
		if has(st, iface) {
			t.Errorf("the adapter of a plain ValueStage is a %s", iface)
		}
	}
}

func has(st pipe.Stage, iface string) bool {
	switch iface {
	case "Swapper":
		_, ok := st.(pipe.Swapper)
		return ok
	case "CopyGrads":
		_, ok := st.(pipe.CopyGrads)
		return ok
	case "Tied":
		_, ok := st.(pipe.Tied)
		return ok
	}
	return false
}

// TestFromValuesPassesThrough: Swapper, CopyGrads and Tied pass through;
// the gradient tensors share the stage's storage, so the runtime's in-place
// sums land in it.
func TestFromValuesPassesThrough(t *testing.T) {
	inner := scaleAll{newScale(2)}
	st, err := pipe.FromValues(inner, newArrs())
	if err != nil {
		t.Fatal(err)
	}
	for _, iface := range []string{"Swapper", "CopyGrads", "Tied"} {
		if !has(st, iface) {
			t.Fatalf("the adapter is not a %s", iface)
		}
	}
	st.(pipe.CopyGrads).Grads()[0].Float64s()[0] += 5
	st.(pipe.Tied).TiedGrads()[0].Float64s()[0] += 1
	if inner.dw.data[0] != 6 {
		t.Errorf("sums into the gradient tensors gave dw = %v, want 6", inner.dw.data[0])
	}
	x := tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}))
	_, saved, err := st.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	sw := st.(pipe.Swapper)
	h, err := sw.Offload(saved)
	if err != nil {
		t.Fatal(err)
	}
	dy := tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 1}))
	if _, err := st.BackwardInput(h, dy); err == nil || !strings.Contains(err.Error(), "swapped out") {
		t.Errorf("a backward on an offloaded context: %v", err)
	}
	back, err := sw.Load(h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.BackwardInput(back, dy); err != nil {
		t.Fatal(err)
	}
	if err := st.BackwardWeight(back, dy); err != nil {
		t.Fatal(err)
	}
	if inner.dw.data[0] != 6+3 {
		t.Errorf("dw after a swapped chunk = %v, want 9", inner.dw.data[0])
	}
}

// TestFromValuesErrors: what cannot work is refused with errors that say
// why: nil parts, gradients whose bytes are a copy, contexts of another
// stage, outputs with broken layouts.
func TestFromValuesErrors(t *testing.T) {
	if _, err := pipe.FromValues(nil, newArrs()); err == nil {
		t.Error("FromValues(nil stage) passed")
	}
	if _, err := pipe.FromValues(newScale(1), nil); err == nil {
		t.Error("FromValues(nil Maker) passed")
	}
	s := scaleAll{newScale(1)}
	s.dw.copy = true
	if _, err := pipe.FromValues(s, newArrs()); err == nil || !strings.Contains(err.Error(), "copy") {
		t.Errorf("gradients that are copies: %v", err)
	}
	st, err := pipe.FromValues(broken{}, newArrs())
	if err != nil {
		t.Fatal(err)
	}
	x := tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}))
	if _, _, err := st.Forward(x); err == nil || !strings.Contains(err.Error(), "output") {
		t.Errorf("an output whose bytes do not match its shape: %v", err)
	}
	good, _ := pipe.FromValues(newScale(1), newArrs())
	if _, err := good.BackwardInput("not a context", x); err == nil || !strings.Contains(err.Error(), "context") {
		t.Errorf("a foreign context: %v", err)
	}
	ints := tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{1, 2}))
	if _, _, err := good.Forward(ints); err == nil || !strings.Contains(err.Error(), "input") {
		t.Errorf("an int tensor: %v", err)
	}
}

// broken returns a value whose bytes are short of its shape.
type broken struct{}

func (broken) Forward(value.Value) (value.Value, any, error) {
	return &arr{shape: []int{3}, data: []float64{1}}, nil, nil
}
func (broken) BackwardInput(any, value.Value) (value.Value, error) { return nil, nil }
func (broken) BackwardWeight(any, value.Value) error               { return nil }

// arrLoss is Σ y·target with dy = target.
type arrLoss struct{}

func (arrLoss) Loss(y, target value.Value) (float64, value.Value, error) {
	yv, tv := y.(*arr), target.(*arr)
	var l float64
	for i := range yv.data {
		l += yv.data[i] * tv.data[i]
	}
	return l, tv, nil
}

type arrData struct{}

func (arrData) Input(m int) (value.Value, error) {
	return &arr{shape: []int{2}, data: []float64{float64(m), 1}}, nil
}
func (arrData) Target(m int) (value.Value, error) {
	return &arr{shape: []int{2}, data: []float64{1, 1}}, nil
}

func TestFromValuesLossAndData(t *testing.T) {
	d := pipe.FromValuesData(arrData{})
	x, err := d.Input(3)
	if err != nil || x.Float64s()[0] != 3 {
		t.Fatalf("Input(3) = %v, %v", x, err)
	}
	tgt, err := d.Target(0)
	if err != nil {
		t.Fatal(err)
	}
	l, dy, err := pipe.FromValuesLoss(arrLoss{}, newArrs()).Loss(x, tgt)
	if err != nil || l != 4 || dy.Float64s()[1] != 1 {
		t.Errorf("Loss = %v, %v, %v; want 4 and dy = target", l, dy, err)
	}
	if _, _, err := pipe.FromValuesLoss(nil, newArrs()).Loss(x, tgt); err == nil {
		t.Error("a nil loss passed")
	}
}

// ident passes its input and gradient through.
type ident struct{}

func (ident) Forward(x value.Value) (value.Value, any, error)          { return x, nil, nil }
func (ident) BackwardInput(_ any, dy value.Value) (value.Value, error) { return dy, nil }
func (ident) BackwardWeight(any, value.Value) error                    { return nil }

// BenchmarkFromValues: the adapter's own cost per chunk (F, I, W of an
// identity stage on a 64×512 float64 activation): views both ways, no copy.
func BenchmarkFromValues(b *testing.B) {
	st, err := pipe.FromValues(ident{}, newArrs())
	if err != nil {
		b.Fatal(err)
	}
	x := tensor.New(tensor.WithShape(64, 512), tensor.WithBacking(make([]float64, 64*512)))
	dy := tensor.New(tensor.WithShape(64, 512), tensor.WithBacking(make([]float64, 64*512)))
	b.ReportAllocs()
	for b.Loop() {
		_, saved, err := st.Forward(x)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.BackwardInput(saved, dy); err != nil {
			b.Fatal(err)
		}
		if err := st.BackwardWeight(saved, dy); err != nil {
			b.Fatal(err)
		}
	}
}
