package gonumvalue_test

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"gonum.org/v1/gonum/mat"
	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/value"
	"github.com/ppgen/ppgen/runtime/value/gonumvalue"
)

func floats(b []byte) []float64 {
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

// TestMatrixBytes: a contiguous matrix's bytes are its storage; a strided
// view's are a copy, row by row (expected values by hand).
func TestMatrixBytes(t *testing.T) {
	m := mat.NewDense(3, 4, []float64{
		1, 2, 3, 4,
		5, 6, 7, 8,
		9, 10, 11, 12,
	})
	v := gonumvalue.Of(m)
	if !v.Aliased() || v.Dtype() != value.Float64 || v.Shape()[0] != 3 || v.Shape()[1] != 4 {
		t.Fatalf("Matrix: aliased %v, %v %v", v.Aliased(), v.Dtype(), v.Shape())
	}
	floats(v.Bytes())[5] = -6
	if m.At(1, 1) != -6 {
		t.Error("a contiguous matrix's Bytes are a copy")
	}
	view := gonumvalue.Of(m.Slice(1, 3, 1, 3).(*mat.Dense)) // rows 1-2, columns 1-2
	if view.Aliased() {
		t.Error("a strided view reports aliased bytes")
	}
	got, want := floats(view.Bytes()), []float64{-6, 7, 10, 11}
	if len(got) != len(want) {
		t.Fatalf("view bytes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("view bytes %v, want %v", got, want)
		}
	}
	row := gonumvalue.Of(m.Slice(2, 3, 1, 3).(*mat.Dense)) // one row of a strided matrix: contiguous
	if !row.Aliased() || floats(row.Bytes())[1] != 11 {
		t.Errorf("one-row view: aliased %v, %v", row.Aliased(), floats(row.Bytes()))
	}
	if _, _, _, err := value.Parts(view); err != nil {
		t.Errorf("Parts of a view: %v", err)
	}
	// The view as a tensor: a copy (its bytes are), with the right values.
	d, err := value.ToDense(view)
	if err != nil || d.Float64s()[2] != 10 {
		t.Errorf("ToDense(view) = %v, %v", d, err)
	}
	if _, err := value.AliasDense(view); err == nil {
		t.Error("AliasDense of a strided view passed")
	}
	var empty mat.Dense
	if b := gonumvalue.Of(&empty).Bytes(); len(b) != 0 {
		t.Errorf("empty matrix: %d bytes", len(b))
	}
}

// TestRoundTrip: matrix → tensor → matrix shares one storage (no copy),
// and a Maker's matrix is zero and writable.
func TestRoundTrip(t *testing.T) {
	m := mat.NewDense(2, 3, []float64{1, 2, 3, 4, 5, 6})
	d, err := value.ToDense(gonumvalue.Of(m))
	if err != nil || !d.Shape().Eq(tensor.Shape{2, 3}) {
		t.Fatalf("ToDense = %v, %v", d, err)
	}
	tv, err := value.FromDense(d)
	if err != nil {
		t.Fatal(err)
	}
	back, err := value.Convert(gonumvalue.Maker{}, tv)
	if err != nil {
		t.Fatal(err)
	}
	bm, err := gonumvalue.Dense(back)
	if err != nil {
		t.Fatal(err)
	}
	bm.Set(1, 2, 60)
	if m.At(1, 2) != 60 || d.Float64s()[5] != 60 {
		t.Error("the round trip copied: the three views do not share storage")
	}
	v, buf, err := gonumvalue.Maker{}.Make(value.Float64, []int{2, 2})
	if err != nil || len(buf) != 32 {
		t.Fatalf("Make: %v, %d bytes", err, len(buf))
	}
	floats(buf)[3] = 4
	if v.(gonumvalue.Matrix).M.At(1, 1) != 4 {
		t.Error("Make's bytes are not the matrix's")
	}
	// Dense of another library's value copies into a new matrix.
	other := tensor.New(tensor.WithShape(1, 2), tensor.WithBacking([]float64{7, 8}))
	ov, _ := value.FromDense(other)
	om, err := gonumvalue.Dense(ov)
	if err != nil || om.At(0, 1) != 8 {
		t.Fatalf("Dense(tensor) = %v, %v", om, err)
	}
	om.Set(0, 1, 0)
	if other.Float64s()[1] != 8 {
		t.Error("Dense of a tensor aliased it")
	}
}

// TestMakerRefuses: layouts gonum has no matrix for, and bytes it cannot
// view, are refused (Make: an ErrLayout; View: false) before allocating.
func TestMakerRefuses(t *testing.T) {
	for _, tc := range []struct {
		dt    value.Dtype
		shape []int
		want  string
	}{
		{value.Float32, []int{2, 2}, "float64, not float32"},
		{value.Float64, []int{2, 2, 2}, "2-D"},
		{value.Float64, []int{4}, "2-D"},
		{value.Float64, []int{0, 2}, "zero dimension"},
		{value.Float64, []int{1 << 40, 1 << 40}, "over"},
		{value.Float64, []int{-1, 2}, "negative"},
	} {
		_, _, err := gonumvalue.Maker{}.Make(tc.dt, tc.shape)
		if err == nil || !errors.Is(err, value.ErrLayout) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Make(%v, %v): %v; want an ErrLayout naming %q", tc.dt, tc.shape, err, tc.want)
		}
		if _, ok := (gonumvalue.Maker{}).View(tc.dt, tc.shape, make([]byte, 32)); ok {
			t.Errorf("View(%v, %v) passed", tc.dt, tc.shape)
		}
	}
	b := make([]byte, 33)
	if _, ok := (gonumvalue.Maker{}).View(value.Float64, []int{2, 2}, b[1:]); ok {
		t.Error("View of misaligned bytes passed")
	}
	if _, ok := (gonumvalue.Maker{}).View(value.Float64, []int{2, 2}, b[:24]); ok {
		t.Error("View of short bytes passed")
	}
	v, ok := (gonumvalue.Maker{}).View(value.Float64, []int{2, 2}, b[:32])
	if !ok || &v.Bytes()[0] != &b[0] {
		t.Error("View of aligned bytes copied or failed")
	}
	// A float32 tensor has no gonum matrix: Dense says so.
	f := tensor.New(tensor.WithShape(1, 1), tensor.WithBacking([]float32{1}))
	fv, _ := value.FromDense(f)
	if _, err := gonumvalue.Dense(fv); err == nil || !strings.Contains(err.Error(), "float32") {
		t.Errorf("Dense(float32): %v", err)
	}
	// Build falls back to Make for misaligned bytes, and copies.
	src := make([]byte, 17)
	src[8] = 1
	bv, err := value.Build(gonumvalue.Maker{}, value.Float64, []int{1, 2}, src[1:])
	if err != nil || &bv.Bytes()[0] == &src[1] || bv.Bytes()[7] != 1 {
		t.Errorf("Build of misaligned bytes: %v", err)
	}
}
