package dtype

import "testing"

func TestDtype(t *testing.T) {
	for _, tc := range []struct {
		d    Dtype
		size int
		name string
	}{
		{Float32, 4, "float32"},
		{Float64, 8, "float64"},
		{0, 0, "dtype(0)"},
		{7, 0, "dtype(7)"},
	} {
		if tc.d.Size() != tc.size || tc.d.String() != tc.name {
			t.Errorf("Dtype(%d): size %d, %q; want %d, %q", uint8(tc.d), tc.d.Size(), tc.d.String(), tc.size, tc.name)
		}
	}
}
