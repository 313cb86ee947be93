package value_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/value"
)

// raw is a Value of given parts, for tests: its bytes need not match.
type raw struct {
	dt    value.Dtype
	shape []int
	b     []byte
	copy  bool // Aliased reports false
}

func (r raw) Dtype() value.Dtype { return r.dt }
func (r raw) Shape() []int       { return r.shape }
func (r raw) Bytes() []byte      { return r.b }
func (r raw) Aliased() bool      { return !r.copy }

func f64Bytes(v ...float64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 8*len(v))
}

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		dt    value.Dtype
		shape []int
		want  int
		err   string
	}{
		{value.Float64, []int{2, 3}, 48, ""},
		{value.Float32, []int{2, 3}, 24, ""},
		{value.Float32, nil, 4, ""}, // no dimensions: one element
		{value.Float64, []int{0, 5}, 0, ""},
		{value.Float64, []int{1 << 37}, 1 << 40, ""},
		{value.Float64, []int{1<<37 + 1}, 0, "over"},
		{value.Float64, []int{1 << 62, 1 << 62, 4}, 0, "over"}, // the product overflows 64 bits
		{value.Float64, []int{math.MaxInt, 2}, 0, "over"},
		{value.Float64, []int{0, 1 << 62, 1 << 62}, 0, "over"}, // empty, but its other dimensions overflow
		{value.Float64, []int{0, 1 << 36}, 0, ""},
		{value.Float64, []int{3, -1}, 0, "negative"},
		{value.Float64, make([]int, 17), 0, "17 dimensions"},
		{0, []int{1}, 0, "dtype"},
		{9, []int{1}, 0, "dtype(9)"},
	} {
		got, err := value.Size(tc.dt, tc.shape)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("Size(%v, %v) = %d, %v; want %d", tc.dt, tc.shape, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, value.ErrLayout)):
			t.Errorf("Size(%v, %v) = %d, %v; want an ErrLayout naming %q", tc.dt, tc.shape, got, err, tc.err)
		}
	}
}

func TestParts(t *testing.T) {
	if _, _, _, err := value.Parts(nil); err == nil {
		t.Error("Parts(nil) passed")
	}
	if _, _, _, err := value.Parts(raw{value.Float64, []int{2, 2}, f64Bytes(1, 2, 3), false}); err == nil || !strings.Contains(err.Error(), "24 bytes, want 32") {
		t.Errorf("short bytes: %v", err)
	}
	dt, sh, b, err := value.Parts(raw{value.Float64, []int{3}, f64Bytes(1, 2, 3), false})
	if err != nil || dt != value.Float64 || len(sh) != 1 || len(b) != 24 {
		t.Errorf("Parts = %v %v %d, %v", dt, sh, len(b), err)
	}
}

// TestTensorAdapter: a contiguous tensor is viewed without a copy both
// ways; a transposed one is materialized; a value of another library
// becomes a tensor over its bytes when they are aligned and a copy when
// not; a scalar and an empty value are copied.
func TestTensorAdapter(t *testing.T) {
	t.Run("contiguous", func(t *testing.T) {
		d := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1, 2, 3, 4}))
		v, err := value.FromDense(d)
		if err != nil {
			t.Fatal(err)
		}
		if v.Dtype() != value.Float32 || len(v.Shape()) != 2 || len(v.Bytes()) != 16 {
			t.Fatalf("value %v %v %d bytes", v.Dtype(), v.Shape(), len(v.Bytes()))
		}
		v.Bytes()[0], v.Bytes()[1], v.Bytes()[2], v.Bytes()[3] = 0, 0, 0, 0
		if d.Float32s()[0] != 0 {
			t.Error("FromDense copied a contiguous tensor")
		}
		back, err := value.ToDense(v)
		if err != nil || back != d {
			t.Errorf("ToDense(FromDense(d)) = %p, %v; want d itself", back, err)
		}
	})
	t.Run("transposed", func(t *testing.T) {
		d := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{1, 2, 3, 4, 5, 6}))
		if err := d.T(); err != nil {
			t.Fatal(err)
		}
		v, err := value.FromDense(d)
		if err != nil {
			t.Fatal(err)
		}
		got := unsafe.Slice((*float64)(unsafe.Pointer(&v.Bytes()[0])), 6)
		want := []float64{1, 4, 2, 5, 3, 6} // rows of the transpose, by hand
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("transposed bytes %v, want %v", got, want)
			}
		}
	})
	t.Run("foreign aligned", func(t *testing.T) {
		b := f64Bytes(1, 2, 3, 4, 5, 6)
		d, err := value.ToDense(raw{value.Float64, []int{3, 2}, b, false})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Shape().Eq(tensor.Shape{3, 2}) || d.Float64s()[5] != 6 {
			t.Fatalf("ToDense = %v %v", d.Shape(), d.Float64s())
		}
		d.Float64s()[0] = 9
		if *(*float64)(unsafe.Pointer(&b[0])) != 9 {
			t.Error("ToDense copied aligned bytes")
		}
		a, err := value.AliasDense(raw{value.Float64, []int{3, 2}, b, false})
		if err != nil || &a.Float64s()[0] != (*float64)(unsafe.Pointer(&b[0])) {
			t.Errorf("AliasDense: %v", err)
		}
	})
	t.Run("foreign misaligned", func(t *testing.T) {
		big := f64Bytes(0, 1.5, 2.5)
		b := make([]byte, 17)
		copy(b[1:], big[8:])
		v := raw{value.Float64, []int{2}, b[1:17], false}
		d, err := value.ToDense(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Float64s(); got[0] != 1.5 || got[1] != 2.5 {
			t.Fatalf("misaligned copy = %v", got)
		}
		if _, err := value.AliasDense(v); err == nil || !strings.Contains(err.Error(), "aligned") {
			t.Errorf("AliasDense of misaligned bytes: %v", err)
		}
	})
	t.Run("scalar and empty", func(t *testing.T) {
		d, err := value.ToDense(raw{value.Float64, nil, f64Bytes(7), false})
		if err != nil || d.Float64s()[0] != 7 || len(d.Shape()) != 0 {
			t.Errorf("scalar: %v %v", d, err)
		}
		d, err = value.ToDense(raw{value.Float32, []int{0, 3}, []byte{}, false})
		if err != nil || !d.Shape().Eq(tensor.Shape{0, 3}) {
			t.Errorf("empty: %v %v", d, err)
		}
	})
	t.Run("errors", func(t *testing.T) {
		if _, err := value.ToDense(raw{value.Float64, []int{2}, f64Bytes(1), false}); err == nil {
			t.Error("ToDense of short bytes passed")
		}
		if _, err := value.ToDense(raw{value.Float64, []int{-2}, nil, false}); err == nil {
			t.Error("ToDense of a negative shape passed")
		}
		if _, err := value.AliasDense(raw{value.Float64, []int{1}, f64Bytes(1), true}); err == nil || !strings.Contains(err.Error(), "copy") {
			t.Errorf("AliasDense of a copy: %v", err)
		}
		i := tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{1, 2}))
		if _, err := value.FromDense(i); err == nil || !strings.Contains(err.Error(), "dtype") {
			t.Errorf("FromDense of ints: %v", err)
		}
		if _, err := value.FromDense(nil); err == nil {
			t.Error("FromDense(nil) passed")
		}
	})
}

// counting is a Maker without a Viewer that counts its Makes.
type counting struct{ n *int }

func (c counting) Make(dt value.Dtype, shape []int) (value.Value, []byte, error) {
	*c.n++
	return value.Tensors{}.Make(dt, shape)
}

// short is a Maker that returns too few bytes.
type short struct{}

func (short) Make(dt value.Dtype, shape []int) (value.Value, []byte, error) {
	return raw{dt, shape, nil, false}, nil, nil
}

func TestBuild(t *testing.T) {
	src := f64Bytes(1, 2, 3, 4)
	v, err := value.Build(value.Tensors{}, value.Float64, []int{2, 2}, src)
	if err != nil {
		t.Fatal(err)
	}
	if &v.Bytes()[0] != &src[0] {
		t.Error("Build with a Viewer copied aligned bytes")
	}
	n := 0
	v, err = value.Build(counting{&n}, value.Float64, []int{2, 2}, src)
	if err != nil || n != 1 || &v.Bytes()[0] == &src[0] || v.Bytes()[8] != src[8] {
		t.Errorf("Build without a Viewer: %v, %d makes, aliasing %v", err, n, &v.Bytes()[0] == &src[0])
	}
	for _, tc := range []struct {
		m     value.Maker
		shape []int
		src   []byte
		want  string
	}{
		{value.Tensors{}, []int{2, 3}, src, "needs 48 bytes, have 32"},
		{value.Tensors{}, []int{-1}, src, "negative"},
		{short{}, []int{2, 2}, src, "returned 0 bytes"},
		{nil, []int{2, 2}, src, "nil Maker"},
	} {
		if _, err := value.Build(tc.m, value.Float64, tc.shape, tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%T, %v): %v; want an error naming %q", tc.m, tc.shape, err, tc.want)
		}
	}
	c, err := value.Convert(value.Tensors{}, raw{value.Float32, []int{1}, []byte{0, 0, 128, 63}, false})
	if err != nil || c.(*value.Tensor).Dense().Float32s()[0] != 1 {
		t.Errorf("Convert: %v", err)
	}
}
