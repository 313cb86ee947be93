package dense

import (
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

func TestFlat(t *testing.T) {
	plain := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{1, 2, 3, 4, 5, 6}))
	if got, err := Flat(plain); err != nil || got != plain {
		t.Errorf("contiguous float64: got %p, %v; want the tensor itself", got, err)
	}
	f32 := tensor.New(tensor.WithShape(3), tensor.WithBacking([]float32{1, 2, 3}))
	if got, err := Flat(f32); err != nil || got != f32 {
		t.Errorf("contiguous float32: got %p, %v", got, err)
	}
	// A column slice is a view: Flat returns a contiguous copy of it.
	v, err := plain.Slice(nil, tensor.S(1))
	if err != nil {
		t.Fatal(err)
	}
	view := v.(*tensor.Dense)
	got, err := Flat(view)
	if err != nil {
		t.Fatal(err)
	}
	if d := got.Data().([]float64); len(d) != 2 || d[0] != 2 || d[1] != 5 {
		t.Errorf("view of column 1: %v, want [2 5]", d)
	}
	for _, tc := range []struct {
		name string
		t    *tensor.Dense
		want string
	}{
		{"int backing", tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{1, 2})), "(2) has backing []int, want []float32 or []float64"},
		{"masked", tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}), tensor.WithMask([]bool{true, false})), "(2) is masked"},
	} {
		if _, err := Flat(tc.t); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}
